/**
 * The health evaluator's trail for operators (issue 22, item 5), on both databases, with two
 * real evaluators sharing one lease and a moved clock: the standby says once whom it stands by
 * behind, warns when the holder stops renewing (killed: it simply never ticks again) and how long
 * until it takes over, then logs the takeover with how long the job had no holder; the holder
 * logs a summary line at its first cycle and then once per summary period, whether or not
 * anything changed.
 */
import { describe, expect, it } from 'vitest'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { HEALTH_EVALUATION_JOB, scheduleHealthEvaluation } from '../../../src/health/evaluator.js'
import { capturingLogger } from '../../fixtures/agent/helpers.js'
import { DIALECTS } from '../../helpers/db.js'
import { at, freshDatabases, HOUR, nodeWith, SETTINGS } from './support.js'

// Six-hour cycles: the cron never fires during the test, every cycle is a tick() at a moved clock.
const INTERVAL = 6 * HOUR
const LEASE = 3 * INTERVAL

describe.each(DIALECTS)('health evaluator trail on %s', (dialect) => {
  const { database } = freshDatabases(dialect)

  it('standby: stands by once, warns when the holder stops renewing, then takes the lease over and says after how long', async () => {
    const db = await database()
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    let now = at(0)
    const a = capturingLogger()
    const b = capturingLogger()
    const evaluator = (logger: typeof a.logger, holder: string) =>
      scheduleHealthEvaluation({ ...SETTINGS, intervalMs: INTERVAL }, { db, logger, chains, now: () => now, holder })
    const holderA = evaluator(a.logger, 'evaluator-a')
    const holderB = evaluator(b.logger, 'evaluator-b')
    const messages = () => b.lines.filter((l) => l.job === HEALTH_EVALUATION_JOB).map((l) => l.msg)
    try {
      expect(await holderA.tick()).toBe(true)
      now = at(HOUR)
      expect(await holderB.tick()).toBe(false)
      now = at(INTERVAL)
      expect(await holderA.tick()).toBe(true)
      expect(await holderB.tick()).toBe(false)
      expect(messages()).toEqual(['job lease held by another replica; standing by'])
      expect(b.lines.find((l) => l.msg === 'job lease held by another replica; standing by')).toMatchObject({ level: 30, lease_holder: 'evaluator-a' })

      // evaluator-a is killed: it renewed last at 6 h, its lease runs to 24 h.
      now = at(2 * INTERVAL)
      expect(await holderB.tick()).toBe(false)
      expect(messages()).toHaveLength(1)
      now = at(3 * INTERVAL)
      expect(await holderB.tick()).toBe(false)
      now = at(3 * INTERVAL + HOUR)
      expect(await holderB.tick()).toBe(false)
      const waiting = b.lines.filter((l) => l.msg === 'job lease holder stopped renewing it; waiting for the lease to expire before taking the job over')
      expect(waiting).toEqual([
        expect.objectContaining({ level: 40, lease_holder: 'evaluator-a', last_renewed_at: at(INTERVAL).toISOString(), lease_expires_at: at(INTERVAL + LEASE).toISOString(), takeover_in_ms: INTERVAL }),
      ])

      now = at(INTERVAL + LEASE)
      expect(await holderB.tick()).toBe(true)
      const takeover = b.lines.filter((l) => l.msg === 'took over the job lease from a holder that stopped renewing it')
      expect(takeover).toEqual([
        expect.objectContaining({ level: 40, job: HEALTH_EVALUATION_JOB, previous_holder: 'evaluator-a', last_renewed_at: at(INTERVAL).toISOString(), without_holder_ms: LEASE }),
      ])
      // Its own renewals are no takeover.
      now = at(2 * INTERVAL + LEASE)
      expect(await holderB.tick()).toBe(true)
      expect(b.lines.filter((l) => l.msg === 'took over the job lease from a holder that stopped renewing it')).toHaveLength(1)
      expect(a.lines.filter((l) => String(l.msg).includes('lease'))).toEqual([])
    } finally {
      await holderB.stop()
      await holderA.stop()
    }
  })

  it('holder: a summary line at the first cycle and once per summary period, also when nothing changed', async () => {
    const db = await database()
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    // Healthy nodes heartbeating, whose agents never reported (application health stays unknown): nothing changes in any cycle.
    const fresh = { state: 'healthy', heartbeatAt: 0, applicationHealth: 'unknown' }
    const nodes = [await nodeWith(db, fresh), await nodeWith(db, fresh)]
    let now = at(0)
    const { logger, lines } = capturingLogger()
    const job = scheduleHealthEvaluation({ ...SETTINGS, intervalMs: INTERVAL, summaryEveryMs: 3 * INTERVAL }, { db, logger, chains, now: () => now })
    const summaries = () => lines.filter((l) => l.msg === 'health evaluation summary')
    try {
      for (let cycle = 0; cycle <= 3; cycle++) {
        now = at(cycle * INTERVAL)
        await db('nodes').whereIn('id', nodes).update({ last_heartbeat: now })
        expect(await job.tick()).toBe(true)
        expect(summaries()).toHaveLength(cycle === 0 ? 1 : cycle < 3 ? 1 : 2)
      }
      expect(summaries()).toEqual([
        expect.objectContaining({ level: 30, cycles: 1, nodes_evaluated: 2, transitions: 0, conflicts: 0, timeouts_counted: 0, migrations_started: 0, since: at(0).toISOString() }),
        expect.objectContaining({ level: 30, cycles: 3, nodes_evaluated: 2, transitions: 0, conflicts: 0, since: at(0).toISOString() }),
      ])
      // The per-cycle line stays at debug when nothing moved.
      expect(lines.filter((l) => l.msg === 'health evaluation cycle').map((l) => l.level)).toEqual([20, 20, 20, 20])
    } finally {
      await job.stop()
    }
  })
})
