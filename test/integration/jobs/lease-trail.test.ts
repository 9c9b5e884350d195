/**
 * The lease trail of a job renewed every minute under a 90 s lease (the housekeeping jobs), on
 * both databases: a standby that reads the lease just before the live holder's renewal, with the
 * holder's clock 4 s behind, does not call the holder gone; once the holder stops, it warns before
 * the lease runs out and logs the takeover (issue 22, item 5).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { schedulePeriodicJob, type PeriodicJob } from '../../../src/jobs/periodic.js'
import { capturingLogger } from '../../fixtures/agent/helpers.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'

const T0 = Date.parse('2026-01-01T00:00:00Z')
const STALE = 'job lease holder stopped renewing it; waiting for the lease to expire before taking the job over'
const TAKEOVER = 'took over the job lease from a holder that stopped renewing it'

describe.each(DIALECTS)('job lease trail on %s', (dialect) => {
  let t: TestDatabase | undefined
  const jobs: PeriodicJob[] = []
  afterEach(async () => {
    for (const job of jobs.splice(0)) await job.stop()
    await t?.destroy()
    t = undefined
  })

  it('no false alarm within the renewal cadence and skew; a warning, then the takeover, once the holder stops', async () => {
    t = await createTestDatabase(dialect)
    let now = T0
    const replica = (holder: string, logger: ReturnType<typeof capturingLogger>['logger']) => {
      const job = schedulePeriodicJob({ name: 'housekeeping', cronTime: '0 0 0 1 1 *', leaseMs: 90_000, db: t!.db, logger, holder, now: () => new Date(now), run: async () => undefined })
      jobs.push(job)
      return job
    }
    const standbyLog = capturingLogger()
    const a = replica('replica-a', capturingLogger().logger)
    const b = replica('replica-b', standbyLog.logger)
    const said = (msg: string) => standbyLog.lines.filter((l) => l.msg === msg)

    expect(await a.tick()).toBe(true)
    // Each minute the standby reads first, 64 s after the holder's last renewal.
    for (const minute of [1, 2]) {
      now = T0 + minute * 60_000 + (minute - 1) * 500 + 4_000
      expect(await b.tick()).toBe(false)
      now += 500
      expect(await a.tick()).toBe(true)
    }
    expect(said(STALE)).toEqual([])
    const lastRenewal = now

    // replica-a is gone.
    now = lastRenewal + 60_000
    expect(await b.tick()).toBe(false)
    expect(said(STALE)).toEqual([])
    now = lastRenewal + 75_000
    expect(await b.tick()).toBe(false)
    expect(said(STALE)).toEqual([expect.objectContaining({ level: 40, lease_holder: 'replica-a', takeover_in_ms: 15_000 })])
    now = lastRenewal + 90_000
    expect(await b.tick()).toBe(true)
    expect(said(TAKEOVER)).toEqual([expect.objectContaining({ level: 40, previous_holder: 'replica-a', without_holder_ms: 90_000 })])
  })
})
