/**
 * Per-caller rate limit of the API server (the "rate limiting" step, after authentication).
 *
 * A token bucket per authenticated user (key `user:<id>`), in memory: each api-server instance
 * counts on its own, so N instances behind a balancer allow up to N times the budget. That is a
 * deliberate trade: the API server's limit protects the service from a runaway script, it is not
 * a quota, and an in-memory check adds no database round trip to every request.
 *
 * Defaults: API_RATE_LIMIT_PER_MINUTE = 600 (10 per second on average), with a burst equal to
 * the per-minute budget, so a caller that was idle may spend a whole minute's worth at once and
 * then continues at the refill rate. Over budget: 429 with `Retry-After` (whole seconds until one
 * request is allowed again).
 *
 * Time is injected (`now`), so tests move the clock instead of sleeping.
 */
import { RateLimitedError } from '../errors.js'
import type { RateLimiter } from '../http/auth.js'
import type { Principal } from '../http/context.js'

export const DEFAULT_API_RATE_LIMIT_PER_MINUTE = 600
/** Buckets kept at most; beyond it the least recently used callers are forgotten (they start full). */
export const DEFAULT_MAX_TRACKED_CALLERS = 100_000

export interface ApiRateLimitSettings {
  /** API_RATE_LIMIT_PER_MINUTE: sustained requests per minute per caller. */
  perMinute?: number
  /** Bucket size; the per-minute budget unless given. */
  burst?: number
  /** Epoch milliseconds. */
  now?: () => number
  maxTrackedCallers?: number
}

export type RateDecision = { allowed: true; remaining: number } | { allowed: false; retryAfterSeconds: number }

export interface ApiRateLimiter {
  /** For createApiApp({ rateLimit }). */
  readonly rateLimit: RateLimiter
  /** Takes one request from `key`'s bucket. */
  take(key: string): RateDecision
  readonly trackedCallers: number
}

interface Bucket {
  tokens: number
  updatedAt: number
}

export function rateLimitKey(principal: Principal): string {
  return `user:${principal.userId}`
}

export function createApiRateLimiter(settings: ApiRateLimitSettings = {}): ApiRateLimiter {
  const perMinute = settings.perMinute ?? DEFAULT_API_RATE_LIMIT_PER_MINUTE
  const capacity = settings.burst ?? perMinute
  if (!(perMinute > 0) || !(capacity >= 1)) throw new RangeError('rate limit: perMinute must be > 0 and burst >= 1')
  const perMs = perMinute / 60_000
  const now = settings.now ?? Date.now
  const maxTracked = settings.maxTrackedCallers ?? DEFAULT_MAX_TRACKED_CALLERS
  // Map order is least recently used first: a touched bucket is re-inserted at the end.
  const buckets = new Map<string, Bucket>()

  const take = (key: string): RateDecision => {
    const at = now()
    const bucket = buckets.get(key)
    let tokens = capacity
    if (bucket) {
      buckets.delete(key)
      tokens = Math.min(capacity, bucket.tokens + Math.max(0, at - bucket.updatedAt) * perMs)
    } else if (buckets.size >= maxTracked) {
      // Forgetting a caller only ever lets it start again with a full bucket.
      buckets.delete(buckets.keys().next().value as string)
    }
    if (tokens >= 1) {
      buckets.set(key, { tokens: tokens - 1, updatedAt: at })
      return { allowed: true, remaining: Math.floor(tokens - 1) }
    }
    buckets.set(key, { tokens, updatedAt: at })
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - tokens) / perMs / 1000)) }
  }

  const rateLimit: RateLimiter = async (principal) => {
    const decision = take(rateLimitKey(principal))
    if (!decision.allowed) {
      throw new RateLimitedError(
        'rate limit exceeded',
        decision.retryAfterSeconds,
        `at most ${perMinute} requests per minute per caller (burst ${capacity}); retry in ${decision.retryAfterSeconds} s`,
      )
    }
  }

  return {
    rateLimit,
    take,
    get trackedCallers() {
      return buckets.size
    },
  }
}
