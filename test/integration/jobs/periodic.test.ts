import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { enqueueEvent } from '../../../src/events/outbox.js'
import { markProcessed } from '../../../src/events/idempotency.js'
import { scheduleEventsHousekeeping } from '../../../src/events/housekeeping.js'
import { releaseLease, tryAcquireLease } from '../../../src/jobs/lease.js'
import { cronEvery, scheduleJobEvery, schedulePeriodicJob } from '../../../src/jobs/periodic.js'
import { createLogger } from '../../../src/log.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'

const logger = createLogger({ level: 'silent' })
const minute = 60_000

describe.each(DIALECTS)('job leases and periodic jobs on %s', (dialect) => {
  let t: TestDatabase
  beforeAll(async () => {
    t = await createTestDatabase(dialect)
  })
  afterAll(async () => {
    await t.destroy()
  })

  it('gives a lease to one holder at a time, renews it for that holder, and hands it over once expired', async () => {
    const t0 = new Date('2026-01-01T00:00:00Z')
    expect(await tryAcquireLease(t.db, 'job-a', 'one', minute, t0)).toBe(true)
    expect(await tryAcquireLease(t.db, 'job-a', 'two', minute, new Date(t0.getTime() + 30_000))).toBe(false)
    expect(await tryAcquireLease(t.db, 'job-a', 'one', minute, new Date(t0.getTime() + 50_000))).toBe(true)
    // Renewed at +50 s, so still held at +100 s; free at +111 s.
    expect(await tryAcquireLease(t.db, 'job-a', 'two', minute, new Date(t0.getTime() + 100_000))).toBe(false)
    expect(await tryAcquireLease(t.db, 'job-a', 'two', minute, new Date(t0.getTime() + 111_000))).toBe(true)
    await releaseLease(t.db, 'job-a', 'one')
    expect(await tryAcquireLease(t.db, 'job-a', 'one', minute, new Date(t0.getTime() + 112_000))).toBe(false)
    await releaseLease(t.db, 'job-a', 'two')
    expect(await tryAcquireLease(t.db, 'job-a', 'one', minute, new Date(t0.getTime() + 113_000))).toBe(true)
  })

  it('lets exactly one of many concurrent contenders take a free lease', async () => {
    const pools = [t.connect(), t.connect(), t.connect(), t.connect()]
    const now = new Date()
    const results = await Promise.all(pools.map((db, i) => tryAcquireLease(db, 'job-race', `holder-${i}`, minute, now)))
    expect(results.filter(Boolean)).toHaveLength(1)
  })

  it('runs a periodic job only in the replica holding its lease, never overlapping itself', async () => {
    const runs: string[] = []
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const make = (holder: string) =>
      schedulePeriodicJob({
        name: 'job-b',
        cronTime: '0 0 0 1 1 *',
        leaseMs: minute,
        db: t.db,
        logger,
        holder,
        run: async () => {
          runs.push(holder)
          await gate
        },
      })
    const a = make('replica-a')
    const b = make('replica-b')
    try {
      const first = a.tick()
      const overlapping = a.tick()
      expect(overlapping).toBe(first)
      release()
      expect(await first).toBe(true)
      expect(await b.tick()).toBe(false)
      expect(runs).toEqual(['replica-a'])
    } finally {
      await a.stop()
      await b.stop()
    }
    // Once the holder stops, its lease is released and another replica takes over at once.
    const c = make('replica-c')
    try {
      expect(await c.tick()).toBe(true)
    } finally {
      await c.stop()
    }
  })

  it('a tick that runs longer than its lease keeps it (renewed while running): no other replica runs beside it; once it ends and the holder is gone, one lease later another does', async () => {
    const LEASE_MS = 600
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const runs: string[] = []
    const make = (holder: string, run: () => Promise<void>) =>
      schedulePeriodicJob({ name: 'job-long', cronTime: '0 0 0 1 1 *', leaseMs: LEASE_MS, db: t.db, logger, holder, run: async () => (runs.push(holder), run()) })
    const a = make('replica-a', () => gate)
    const b = make('replica-b', async () => {})
    try {
      const long = a.tick()
      await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS))
      // Three leases into a's tick, its lease still stands.
      expect(await b.tick()).toBe(false)
      release()
      expect(await long).toBe(true)
      expect(runs).toEqual(['replica-a'])
      // The holder dies without releasing (no stop): the renewal ended with its tick, so one
      // lease later the other replica takes the job.
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 100))
      expect(await b.tick()).toBe(true)
      expect(runs).toEqual(['replica-a', 'replica-b'])
    } finally {
      release()
      await a.stop()
      await b.stop()
    }
  })

  it('a job scheduled every interval runs under its lease at the injected time, and the lease outlives the interval', async () => {
    const t0 = new Date('2026-02-01T00:00:00Z')
    let clock = t0
    const ran: Date[] = []
    const every5m = (holder: string) =>
      scheduleJobEvery(
        { db: t.db, logger, now: () => clock, holder, cronTime: '0 0 0 1 1 *' },
        { name: 'job-every', intervalMs: 5 * minute, run: async (now) => void ran.push(now) },
      )
    const a = every5m('replica-a')
    const b = every5m('replica-b')
    try {
      expect(await a.tick()).toBe(true)
      expect(ran).toEqual([t0])
      const lease = (await t.db('job_leases').where({ name: 'job-every' }).first()) as { holder: string; expires_at: Date | string | number }
      expect(lease.holder).toBe('replica-a')
      expect(new Date(lease.expires_at).getTime()).toBe(t0.getTime() + 10 * minute)
      // Past one interval the holder's lease still stands: the other replica does not run it.
      clock = new Date(t0.getTime() + 6 * minute)
      expect(await b.tick()).toBe(false)
      expect(await a.tick()).toBe(true)
      expect(ran).toEqual([t0, clock])
    } finally {
      await a.stop()
      await b.stop()
    }
    expect(cronEvery(5 * minute)).toBe('0 */5 * * * *')
  })

  it('housekeeping drops expired idempotency keys and old published outbox rows, nothing else', async () => {
    const now = new Date()
    const old = new Date(now.getTime() - 4 * 86_400_000)
    await markProcessed(t.db, 'expired', 'test', minute, old)
    await markProcessed(t.db, 'fresh', 'test', 7 * 86_400_000, now)
    const oldPublished = await enqueueEvent(t.db, { subject: 'events.test.old', payload: { n: 1 } }, old)
    const oldUnpublished = await enqueueEvent(t.db, { subject: 'events.test.pending', payload: { n: 2 } }, old)
    const recentPublished = await enqueueEvent(t.db, { subject: 'events.test.recent', payload: { n: 3 } }, now)
    await t.db('outbox').whereIn('message_id', [oldPublished]).update({ published_at: old })
    await t.db('outbox').whereIn('message_id', [recentPublished]).update({ published_at: now })

    const job = scheduleEventsHousekeeping({ db: t.db, logger, outboxRetentionMs: 3 * 86_400_000, now: () => now })
    try {
      expect(await job.tick()).toBe(true)
    } finally {
      await job.stop()
    }
    const keys = (await t.db('idempotency_keys').select('key')).map((r: { key: string }) => r.key)
    expect(keys).toEqual(['idempotency:fresh'])
    const outbox = (await t.db('outbox').select('message_id')).map((r: { message_id: string }) => r.message_id).sort()
    expect(outbox).toEqual([oldUnpublished, recentPublished].sort())
  })
})
