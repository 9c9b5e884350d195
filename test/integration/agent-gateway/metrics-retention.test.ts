import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startHealthEvaluator } from '../../../daemons/health-evaluator.js'
import { upsertAgentStatus } from '../../../src/agent-gateway/heartbeats.js'
import { purgeExpiredNodeMetrics, scheduleNodeMetricsPurge } from '../../../src/agent-gateway/metrics-retention.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { createLogger } from '../../../src/log.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'

const logger = createLogger({ level: 'silent' })
const DAY = 86_400_000
const HOUR = 3_600_000
const NEVER = '0 0 0 1 1 *'

describe.each(DIALECTS)('node metrics retention (spec: 30 days) on %s', (dialect) => {
  let t: TestDatabase
  beforeAll(async () => {
    t = await createTestDatabase(dialect)
  })
  afterAll(async () => {
    await t.destroy()
  })

  /** One node per age, each with an agent report that old at `now`; returns node id by age label. */
  async function reportsAged(now: Date, ages: Record<string, number>): Promise<Record<string, string>> {
    const ids: Record<string, string> = {}
    for (const [label, ageMs] of Object.entries(ages)) {
      const node = await insertTestNode(t.db, now)
      ids[label] = node.id
      await upsertAgentStatus(t.db, [
        {
          nodeId: node.id,
          receivedAt: new Date(now.getTime() - ageMs),
          agentVersion: '1.0.0',
          binaryVersion: '1.0.0',
          syncStatus: 'synced',
          processState: 'running',
          restartsInWindow: 0,
          metrics: { block_height: 100, peer_count: 8 },
          runningCommandIds: [],
        },
      ])
    }
    return ids
  }

  async function remaining(ids: Record<string, string>): Promise<string[]> {
    const rows = (await t.db('agent_status').whereIn('node_id', Object.values(ids)).select('node_id')) as { node_id: string }[]
    const kept = new Set(rows.map((r) => r.node_id))
    return Object.entries(ids)
      .filter(([, id]) => kept.has(id))
      .map(([label]) => label)
      .sort()
  }

  it('deletes reports older than 30 days in batches and keeps newer ones', async () => {
    const now = new Date('2026-03-01T12:00:00Z')
    const ids = await reportsAged(now, {
      a_year: 365 * DAY,
      b_45d: 45 * DAY,
      c_31d: 31 * DAY,
      d_30d_1min: 30 * DAY + 60_000,
      e_30d_2min: 30 * DAY + 120_000,
      f_29d: 29 * DAY,
      g_1h: HOUR,
      h_now: 0,
    })
    const purged = await purgeExpiredNodeMetrics(t.db, { now, batchSize: 2 })
    expect(purged).toEqual({ deleted: 5, batches: 3 })
    expect(await remaining(ids)).toEqual(['f_29d', 'g_1h', 'h_now'])
    // Nothing left to delete: one short batch.
    expect(await purgeExpiredNodeMetrics(t.db, { now, batchSize: 2 })).toEqual({ deleted: 0, batches: 1 })
  })

  it('runs as a periodic job under a database lease, on the injected clock', async () => {
    const start = new Date('2026-04-01T00:00:00Z')
    let clock = start
    const now = () => clock
    const ids = await reportsAged(start, { fresh: 0, week: 7 * DAY })
    const a = scheduleNodeMetricsPurge({ db: t.db, logger, cronTime: NEVER, holder: 'a', now })
    const b = scheduleNodeMetricsPurge({ db: t.db, logger, cronTime: NEVER, holder: 'b', now })
    try {
      expect(await a.tick()).toBe(true)
      expect(await remaining(ids)).toEqual(['fresh', 'week'])
      // The other replica does not run while the lease is held.
      expect(await b.tick()).toBe(false)
      // 24 days on, the week-old report is 31 days old.
      clock = new Date(start.getTime() + 24 * DAY)
      expect(await b.tick()).toBe(true)
      expect(await remaining(ids)).toEqual(['fresh'])
    } finally {
      await a.stop()
      await b.stop()
    }
  })

  it('is one of the health-evaluator jobs (the daemon and `nodeplane up`)', async () => {
    const start = new Date('2026-06-01T00:00:00Z')
    let clock = start
    const ids = await reportsAged(start, { old: 29 * DAY, fresh: 0 })
    const evaluator = await startHealthEvaluator(
      {
        PENDING_SUBSCRIPTION_TTL: 30 * 60_000,
        SUBSCRIPTION_GRACE_PERIOD: DAY,
        SUBSCRIPTION_CLEANUP_INTERVAL: 6 * HOUR,
        HEALTH_EVALUATION_INTERVAL: 6 * HOUR,
        HEARTBEAT_TIMEOUT: 60_000,
        MIGRATION_GRACE: 60_000,
        MIGRATIONS_PER_CYCLE: 10,
        MIGRATION_COOLDOWN: HOUR,
        MAINTENANCE_RECOVERY_INTERVAL: 6 * HOUR,
        MAINTENANCE_RECOVERY_AFTER: HOUR,
        INCIDENT_RESOLUTION_DEBOUNCE: 3,
        INCIDENT_FLAP_THRESHOLD: 3,
        INCIDENT_FLAP_WINDOW: 15 * 60_000,
        INCIDENT_FLAP_QUIET: 15 * 60_000,
        INCIDENT_ESCALATE_AFTER: HOUR,
        IDEMPOTENCY_KEY_TTL: 7 * DAY,
        UPTIME_ROLLUP_INTERVAL: 6 * HOUR,
        UPTIME_ROLLUP_BATCH_SIZE: 500,
        UPTIME_RETENTION: 90 * DAY,
      },
      { db: t.db, bus: createLocalBus(), logger, chains: staticChainSource(await loadChainCatalogue(defaultConfigDir())), now: () => clock },
    )
    try {
      clock = new Date(start.getTime() + 2 * DAY)
      expect(await evaluator.nodeMetricsPurge.tick()).toBe(true)
      expect(await remaining(ids)).toEqual(['fresh'])
    } finally {
      await evaluator.stop()
    }
  })
})
