/**
 * Throttles failed authentication per client address on the api-server (docs/auth.md, "Failed
 * authentication"). Without it 2,000 random API keys were answered in 1.9 s, each a database
 * lookup: a free oracle for guessing keys and a cheap way to load the database.
 *
 * Two layers, both token buckets of AUTH_FAILURE_LIMIT_PER_MINUTE failures per address:
 *
 * - In this process's memory, in front: once an address has no failure left in its bucket, every
 *   request from it that carries a credential is answered 429 at once, before the credential is
 *   looked at, so no database read happens.
 * - Shared through the database (`auth_rate_buckets`, key `auth-failure:<address>`): every
 *   failure is also counted there, so N api-server instances do not give an address N budgets.
 *   When the shared bucket refuses, the address is blocked in memory until Retry-After. A
 *   database that cannot count leaves the memory layer in charge (auth-rate-limit.ts's fallback).
 *
 * Only failures are counted: a client whose credentials work is never slowed by this.
 */
import { RateLimitedError } from '../errors.js'
import { MemoryBuckets, retryAfterSeconds, type AuthRateLimiter } from './auth-rate-limit.js'

export const DEFAULT_AUTH_FAILURE_LIMIT_PER_MINUTE = 30
/** Addresses blocked by the shared bucket kept before expired blocks are swept. */
const BLOCKED_SWEEP_SIZE = 10_000

export interface FailedAuthThrottleOptions {
  limitPerMinute: number
  /** The shared bucket (createAuthRateLimiter on the control-plane database); memory only without it. */
  shared?: AuthRateLimiter
  now: () => Date
}

export interface FailedAuthThrottle {
  /** Throws RateLimitedError (429) when `address` has used up its failures; reads nothing. */
  check(address: string): void
  /** Records one failed authentication by `address`. */
  failed(address: string): Promise<void>
}

export function failureKey(address: string): string {
  return `auth-failure:${address}`
}

export function createFailedAuthThrottle(options: FailedAuthThrottleOptions): FailedAuthThrottle {
  const memory = new MemoryBuckets(options.limitPerMinute)
  const blockedUntil = new Map<string, number>()

  const refuse = (seconds: number): never => {
    throw new RateLimitedError(
      'too many failed authentications',
      seconds,
      `at most ${options.limitPerMinute} failed authentications per minute from one address; retry in ${seconds} s`,
    )
  }

  return {
    check(address) {
      const nowMs = options.now().getTime()
      const until = blockedUntil.get(address)
      if (until !== undefined) {
        if (until > nowMs) refuse(Math.max(1, Math.ceil((until - nowMs) / 1000)))
        blockedUntil.delete(address)
      }
      const bucket = memory.isEmpty(address, nowMs)
      if (bucket.empty) refuse(retryAfterSeconds(bucket.tatMs, nowMs, options.limitPerMinute))
    },
    async failed(address) {
      const nowMs = options.now().getTime()
      memory.take(address, nowMs)
      if (!options.shared) return
      try {
        await options.shared.hit(failureKey(address))
      } catch (err) {
        if (!(err instanceof RateLimitedError)) throw err
        if (blockedUntil.size >= BLOCKED_SWEEP_SIZE) {
          for (const [key, until] of blockedUntil) if (until <= nowMs) blockedUntil.delete(key)
        }
        blockedUntil.set(address, nowMs + err.retryAfterSeconds * 1000)
      }
    },
  }
}
