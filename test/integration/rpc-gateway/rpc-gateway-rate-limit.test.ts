/**
 * The rpc-gateway's per-key token bucket on both databases: shared between limiters (gateways)
 * on one database, refilled by the injected clock, leased a few tokens at a time, and counted in
 * memory while the database is unavailable.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLogger } from '../../../src/log.js'
import { createRpcRateLimiter } from '../../../src/rpc-gateway/rate-limit.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'

const logger = createLogger({ level: 'silent' })

describe.each(DIALECTS)('rpc rate limit on %s', (dialect) => {
  let t: TestDatabase
  let clock = 1_700_000_000_000
  const now = () => clock

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
  })
  afterEach(async () => {
    await t.destroy()
  })

  it('one bucket per key for every gateway on the database, refilled with time', async () => {
    const a = createRpcRateLimiter({ db: t.db, perSecond: 1, burst: 3, logger, now })
    const b = createRpcRateLimiter({ db: t.connect(), perSecond: 1, burst: 3, logger, now })
    expect(await a.take('key:1', 2)).toEqual({ allowed: true })
    expect(await b.take('key:1', 1)).toEqual({ allowed: true })
    expect(await b.take('key:1', 1)).toEqual({ allowed: false, retryAfterSeconds: 1 })
    expect(await a.take('key:1', 2)).toEqual({ allowed: false, retryAfterSeconds: 2 })
    expect(await a.take('key:2', 3)).toEqual({ allowed: true })
    clock += 1_000
    expect(await b.take('key:1', 1)).toEqual({ allowed: true })
    expect(await a.take('key:1', 1)).toMatchObject({ allowed: false })
    expect(a.store).toBe('database')
  })

  it('takes a small lease with a call, so most calls cost no database write; the lease expires', async () => {
    const limiter = createRpcRateLimiter({ db: t.db, perSecond: 100, burst: 100, logger, now })
    expect(await limiter.take('key:lease', 1)).toEqual({ allowed: true })
    // 1 for the call and 5 (a twentieth of a second's refill) leased.
    expect(Number((await t.db('rpc_rate_buckets').where({ bucket_key: 'key:lease' }).first()).tokens)).toBe(94)
    for (let i = 0; i < 5; i++) expect(await limiter.take('key:lease', 1)).toEqual({ allowed: true })
    expect(Number((await t.db('rpc_rate_buckets').where({ bucket_key: 'key:lease' }).first()).tokens)).toBe(94)
    clock += 2_000
    expect(await limiter.take('key:lease', 1)).toEqual({ allowed: true })
    expect(Number((await t.db('rpc_rate_buckets').where({ bucket_key: 'key:lease' }).first()).tokens)).toBe(94)
  })

  it('a burst of concurrent calls spends the bucket call by call: they share one lease instead of each taking its own', async () => {
    // A lease of 50 (a twentieth of 1,000/s) per database take: 100 concurrent calls each taking
    // their own would drain the bucket of 100 after two of them.
    const limiter = createRpcRateLimiter({ db: t.db, perSecond: 1_000, burst: 100, logger, now })
    const decisions = await Promise.all(Array.from({ length: 100 }, () => limiter.take('key:burst', 1)))
    expect(decisions.filter((d) => d.allowed)).toHaveLength(100)
    expect(await limiter.take('key:burst', 1)).toEqual({ allowed: false, retryAfterSeconds: 1 })
  })

  it('concurrent calls on an empty bucket share the one refusal of the database take in flight instead of queueing a trip each', async () => {
    const limiter = createRpcRateLimiter({ db: t.db, perSecond: 1, burst: 2, logger, now })
    expect(await limiter.take('key:empty', 2)).toEqual({ allowed: true })
    let statements = 0
    const onQuery = (query: { sql: string }) => {
      if (query.sql.includes('rpc_rate_buckets')) statements += 1
    }
    t.db.on('query', onQuery)
    try {
      const decisions = await Promise.all(Array.from({ length: 50 }, () => limiter.take('key:empty', 1)))
      expect(decisions.every((d) => !d.allowed)).toBe(true)
    } finally {
      t.db.off('query', onQuery)
    }
    // One take: its read, (its insert,) its write; not fifty.
    expect(statements).toBeLessThanOrEqual(4)
  })

  it('counts in memory, per gateway, while the database is unavailable', async () => {
    const broken = t.connect()
    const limiter = createRpcRateLimiter({ db: broken, perSecond: 1, burst: 2, logger, now, retryDatabaseAfterMs: 5_000 })
    await broken.destroy()
    expect(await limiter.take('key:m', 1)).toEqual({ allowed: true })
    expect(limiter.store).toBe('memory')
    expect(await limiter.take('key:m', 1)).toEqual({ allowed: true })
    expect(await limiter.take('key:m', 1)).toEqual({ allowed: false, retryAfterSeconds: 1 })
  })
})
