/**
 * The uptime state log and the hourly worker on both databases, against hand-computed buckets.
 * Time only moves through the injected clock.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { toBool, toDate } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { applyHealthUpdate, forceNodeState, type StateWriter } from '../../../src/nodes/health-state-machine.js'
import type { NodeState } from '../../../src/nodes/states.js'
import { readStateLog } from '../../../src/uptime/state-log.js'
import { runUptimeRollup, scheduleUptimeRollup } from '../../../src/uptime/rollup.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'

const logger = createLogger({ level: 'silent' })
const MIN = 60_000
const HOUR = 60 * MIN
const DAY = 24 * HOUR
const NEVER = '0 0 0 1 1 *'

const databases: TestDatabase[] = []
afterEach(async () => {
  while (databases.length > 0) await databases.pop()!.destroy()
})
async function fresh(dialect: (typeof DIALECTS)[number]): Promise<Db> {
  const t = await createTestDatabase(dialect)
  databases.push(t)
  return t.db
}

const at = (iso: string) => new Date(iso)

async function move(db: Db, nodeId: string, state: NodeState, now: Date, writer: StateWriter = 'heartbeat_evaluation'): Promise<void> {
  await db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: { writer, state }, now }))
}

interface BucketRow {
  hour: string
  up: number
  down: number
  unknown: number
  total: number
  complete: boolean
}

async function buckets(db: Db, nodeId: string): Promise<BucketRow[]> {
  const rows = (await db('uptime_hourly_buckets').where({ node_id: nodeId }).orderBy('bucket_hour')) as Record<string, unknown>[]
  return rows.map((r) => ({
    hour: toDate(r.bucket_hour).toISOString().slice(0, 16),
    up: Number(r.uptime_seconds),
    down: Number(r.downtime_seconds),
    unknown: Number(r.unknown_seconds),
    total: Number(r.total_seconds),
    complete: toBool(r.is_complete),
  }))
}

const row = (hour: string, up: number, down: number, unknown: number, complete: boolean): BucketRow => ({ hour, up, down, unknown, total: up + down + unknown, complete })

/**
 * 22:50 created (provisioning; grace to 23:00), 23:05 syncing, 23:20 healthy, 23:50 down,
 * 00:10 (next day) healthy.
 */
async function story(db: Db): Promise<string> {
  const node = await insertTestNode(db, at('2026-05-01T22:50:00Z'))
  await move(db, node.id, 'syncing', at('2026-05-01T23:05:00Z'), 'provisioning')
  await move(db, node.id, 'healthy', at('2026-05-01T23:20:00Z'))
  await move(db, node.id, 'down', at('2026-05-01T23:50:00Z'))
  await move(db, node.id, 'healthy', at('2026-05-02T00:10:00Z'))
  return node.id
}

describe.each(DIALECTS)('uptime state log and hourly worker on %s', (dialect) => {
  it('logs every state change with its writer, closing the previous interval in the same transaction', async () => {
    const db = await fresh(dialect)
    const node = await insertTestNode(db, at('2026-05-01T10:00:00Z'))
    await move(db, node.id, 'syncing', at('2026-05-01T10:04:00Z'), 'provisioning')
    // A sync_status change is not a state change: no log row.
    await db.transaction((trx) => applyHealthUpdate(trx, { nodeId: node.id, change: { writer: 'sync_event', sync_status: 'synced' }, now: at('2026-05-01T10:05:00Z') }))
    await db.transaction((trx) => forceNodeState(trx, { nodeId: node.id, state: 'degraded', reason: 'migration failed', now: at('2026-05-01T10:06:00Z') }))
    // A change rolled back leaves the log as it was.
    await expect(
      db.transaction(async (trx) => {
        await applyHealthUpdate(trx, { nodeId: node.id, change: { writer: 'heartbeat_evaluation', state: 'down' }, now: at('2026-05-01T10:07:00Z') })
        throw new Error('abort')
      }),
    ).rejects.toThrow('abort')

    const log = await readStateLog(db, node.id)
    expect(log.map((e) => [e.state, e.entered_at.toISOString().slice(11, 16), e.exited_at?.toISOString().slice(11, 16) ?? null, e.trigger])).toEqual([
      ['provisioning', '10:00', '10:04', 'node_created'],
      ['syncing', '10:04', '10:06', 'provisioning'],
      ['degraded', '10:06', null, 'compensation: migration failed'],
    ])
  })

  it('computes buckets across hour and day boundaries, provisioning grace included', async () => {
    const db = await fresh(dialect)
    const nodeId = await story(db)
    const result = await runUptimeRollup(db, { now: at('2026-05-02T00:30:00Z'), logger })
    expect(result).toMatchObject({ nodes: 1, buckets_written: 3 })
    expect(await buckets(db, nodeId)).toEqual([
      // 22:50-23:00 provisioning within the grace.
      row('2026-05-01T22:00', 600, 0, 0, true),
      // 23:00-23:05 provisioning past the grace; 15 min syncing; 30 min healthy; 10 min down.
      row('2026-05-01T23:00', 1800, 900, 900, true),
      // The current hour: 10 min down, 20 min healthy so far.
      row('2026-05-02T00:00', 1200, 600, 0, false),
    ])
  })

  it('recomputes an incomplete bucket, and one marked incomplete, but leaves complete ones alone', async () => {
    const db = await fresh(dialect)
    const nodeId = await story(db)
    await runUptimeRollup(db, { now: at('2026-05-02T00:30:00Z') })
    await move(db, nodeId, 'down', at('2026-05-02T00:45:00Z'))

    // Two finished hours changed by hand; only the later one is marked for recomputation.
    await db('uptime_hourly_buckets').where({ node_id: nodeId, bucket_hour: at('2026-05-01T22:00:00Z') }).update({ uptime_seconds: 1 })
    await db('uptime_hourly_buckets').where({ node_id: nodeId, bucket_hour: at('2026-05-01T23:00:00Z') }).update({ uptime_seconds: 0, total_seconds: 0, is_complete: false })

    await runUptimeRollup(db, { now: at('2026-05-02T01:10:00Z') })
    expect(await buckets(db, nodeId)).toEqual([
      // Complete and not marked: the worker trusts it (reads sum pre-computed buckets).
      { ...row('2026-05-01T22:00', 600, 0, 0, true), up: 1 },
      row('2026-05-01T23:00', 1800, 900, 900, true),
      // 00:00-00:10 down, 00:10-00:45 healthy, 00:45-01:00 down: now complete.
      row('2026-05-02T00:00', 2100, 1500, 0, true),
      row('2026-05-02T01:00', 0, 600, 0, false),
    ])
  })

  it('counts maintenance as down and stops at the hour a node was terminated', async () => {
    const db = await fresh(dialect)
    const node = await insertTestNode(db, at('2026-05-01T09:00:00Z'))
    await move(db, node.id, 'syncing', at('2026-05-01T09:05:00Z'), 'provisioning')
    await move(db, node.id, 'healthy', at('2026-05-01T09:30:00Z'))
    await move(db, node.id, 'maintenance', at('2026-05-01T10:00:00Z'), 'upgrade')
    await move(db, node.id, 'syncing', at('2026-05-01T10:20:00Z'), 'upgrade')
    await move(db, node.id, 'terminating', at('2026-05-01T10:40:00Z'), 'termination')
    await move(db, node.id, 'terminated', at('2026-05-01T10:50:00Z'), 'termination')
    await runUptimeRollup(db, { now: at('2026-05-01T15:00:00Z') })
    // 09:00-09:05 provisioning, 25 min syncing, 30 min healthy; 20 min maintenance, 20 min syncing, 10 min terminating.
    expect(await buckets(db, node.id)).toEqual([row('2026-05-01T09:00', 2100, 0, 1500, true), row('2026-05-01T10:00', 0, 1200, 1800, true)])
  })

  it('purges buckets and log rows older than 90 days, and computes nothing before that', async () => {
    const db = await fresh(dialect)
    const gone = await insertTestNode(db, at('2026-01-01T00:00:00Z'))
    await move(db, gone.id, 'terminating', at('2026-01-01T01:00:00Z'), 'termination')
    await move(db, gone.id, 'terminated', at('2026-01-01T01:30:00Z'), 'termination')
    const live = await insertTestNode(db, at('2026-01-01T00:00:00Z'))
    await move(db, live.id, 'syncing', at('2026-01-01T00:05:00Z'), 'provisioning')
    await move(db, live.id, 'healthy', at('2026-01-01T00:10:00Z'))
    await runUptimeRollup(db, { now: at('2026-01-01T03:00:00Z') })
    expect(await buckets(db, gone.id)).toHaveLength(2)

    const later = at('2026-04-01T12:30:00Z')
    const result = await runUptimeRollup(db, { now: later })
    const oldest = at('2026-01-01T12:00:00Z') // floor to the hour of later - 90 days
    expect(later.getTime() - oldest.getTime()).toBeLessThan(90 * DAY + HOUR)
    expect(await buckets(db, gone.id)).toEqual([])
    expect(await readStateLog(db, gone.id)).toEqual([])
    const kept = await buckets(db, live.id)
    expect(kept[0]?.hour).toBe('2026-01-01T12:00')
    expect(kept).toHaveLength(Math.floor((later.getTime() - oldest.getTime()) / HOUR) + 1)
    expect(kept.every((b) => b.up === 3600 || b.hour === '2026-04-01T12:00')).toBe(true)
    // The provisioning and syncing intervals ended more than 90 days ago; the open one stays.
    expect((await readStateLog(db, live.id)).map((e) => e.state)).toEqual(['healthy'])
    // The ended node's two hours; the live node's 00:00 to 03:00 (the last one empty, computed at 03:00 sharp).
    expect(result.buckets_purged).toBe(2 + 4)
  })

  it('works through more nodes than fit in one batch', async () => {
    const db = await fresh(dialect)
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push((await insertTestNode(db, at('2026-05-01T10:00:00Z'))).id)
    const result = await runUptimeRollup(db, { now: at('2026-05-01T11:30:00Z'), batchSize: 2 })
    expect(result).toMatchObject({ nodes: 5, batches: 3, buckets_written: 10 })
    for (const id of ids) expect(await buckets(db, id)).toEqual([row('2026-05-01T10:00', 600, 3000, 0, true), row('2026-05-01T11:00', 0, 1800, 0, false)])
  })

  it('runs in one of two schedulers at a time, sharing the database lease', async () => {
    const db = await fresh(dialect)
    const node = await insertTestNode(db, at('2026-05-01T10:00:00Z'))
    const now = () => at('2026-05-01T10:30:00Z')
    const a = scheduleUptimeRollup({ db, logger, cronTime: NEVER, holder: 'a', now })
    const b = scheduleUptimeRollup({ db, logger, cronTime: NEVER, holder: 'b', now })
    try {
      const ran = await Promise.all([a.tick(), b.tick()])
      expect(ran.filter(Boolean)).toHaveLength(1)
      expect(await buckets(db, node.id)).toEqual([row('2026-05-01T10:00', 600, 1200, 0, false)])
      const [holder, other] = ran[0] ? [a, b] : [b, a]
      expect(await other.tick()).toBe(false)
      await holder.stop()
      expect(await other.tick()).toBe(true)
    } finally {
      await a.stop()
      await b.stop()
    }
  })
})
