import { describe, expect, it } from 'vitest'
import { createApiRateLimiter, DEFAULT_API_RATE_LIMIT_PER_MINUTE } from '../../../src/auth/api-rate-limit.js'
import { RateLimitedError } from '../../../src/errors.js'
import type { ApiContext } from '../../../src/http/context.js'

function clock(start = 1_000_000) {
  const c = { ms: start, now: () => c.ms }
  return c
}

describe('API rate limiter (token bucket)', () => {
  it('defaults to 600 per minute with a burst of 600', () => {
    const c = clock()
    const limiter = createApiRateLimiter({ now: c.now })
    expect(DEFAULT_API_RATE_LIMIT_PER_MINUTE).toBe(600)
    for (let i = 0; i < 600; i++) expect(limiter.take('user:a').allowed).toBe(true)
    expect(limiter.take('user:a')).toEqual({ allowed: false, retryAfterSeconds: 1 })
    c.ms += 100 // 10 per second refill: one token per 100 ms
    expect(limiter.take('user:a').allowed).toBe(true)
    expect(limiter.take('user:a').allowed).toBe(false)
  })

  it('computes Retry-After as the whole seconds until one request fits', () => {
    const c = clock()
    const limiter = createApiRateLimiter({ perMinute: 2, now: c.now })
    expect(limiter.take('k')).toEqual({ allowed: true, remaining: 1 })
    expect(limiter.take('k')).toEqual({ allowed: true, remaining: 0 })
    expect(limiter.take('k')).toEqual({ allowed: false, retryAfterSeconds: 30 })
    c.ms += 29_001
    expect(limiter.take('k')).toEqual({ allowed: false, retryAfterSeconds: 1 })
    c.ms += 999
    expect(limiter.take('k').allowed).toBe(true)
  })

  it('honours a burst different from the per-minute budget, and a clock going backwards', () => {
    const c = clock()
    const limiter = createApiRateLimiter({ perMinute: 60, burst: 5, now: c.now })
    for (let i = 0; i < 5; i++) expect(limiter.take('k').allowed).toBe(true)
    expect(limiter.take('k').allowed).toBe(false)
    c.ms -= 60_000
    expect(limiter.take('k').allowed).toBe(false)
    c.ms += 61_000
    expect(limiter.take('k').allowed).toBe(true)
  })

  it('forgets the least recently used callers beyond its capacity', () => {
    const c = clock()
    const limiter = createApiRateLimiter({ perMinute: 1, now: c.now, maxTrackedCallers: 3 })
    for (const k of ['a', 'b', 'c']) limiter.take(k)
    limiter.take('a') // a is now the most recent
    limiter.take('d') // evicts b
    expect(limiter.trackedCallers).toBe(3)
    expect(limiter.take('b').allowed).toBe(true)
    expect(limiter.take('a').allowed).toBe(false)
  })

  it('throws RateLimitedError keyed by the principal user', async () => {
    const c = clock()
    const limiter = createApiRateLimiter({ perMinute: 1, now: c.now })
    const ctx = {} as ApiContext
    await limiter.rateLimit({ userId: 'u1', method: 'api_key', scopes: [] }, ctx)
    const err = await limiter.rateLimit({ userId: 'u1', method: 'jwt', scopes: [] }, ctx).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(RateLimitedError)
    expect((err as RateLimitedError).retryAfterSeconds).toBe(60)
    await expect(limiter.rateLimit({ userId: 'u2', method: 'jwt', scopes: [] }, ctx)).resolves.toBeUndefined()
  })
})
