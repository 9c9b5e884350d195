/**
 * The auth server's rate limit (spec: "Auth server rate limit: AUTH_RATE_LIMIT_PER_MINUTE,
 * default 20, shared across instances; if the shared store is unavailable it falls back to
 * per-instance counting").
 *
 * A token bucket per client, kept as GCRA (the generic cell rate algorithm): one number per
 * client, its "theoretical arrival time" `tat`. With a limit of L per minute each request costs
 * I = 60 s / L; a request at `now` is admitted when max(tat, now) + I - now <= 60 s, and then tat
 * moves to max(tat, now) + I. So an idle client may send L requests at once (a full bucket), then
 * one every I. Unlike the fixed one-minute windows this replaced, a burst at 10:00:59 and another
 * at 10:01:00 share one budget: L in total, not 2L.
 *
 * Shared through the database: `auth_rate_buckets` holds (client_key, tat_ms, admitted), updated
 * by one atomic upsert that decides and records in the same statement, so every instance on one
 * database draws from the same bucket. A refused request does not move tat (Retry-After says when
 * the next one fits, and stays true).
 *
 * When the database fails or takes longer than `databaseTimeoutMs`, the limiter keeps the buckets
 * in this process's memory instead (each instance then allows the limit on its own), logs that
 * once, and keeps serving; it tries the database again every `retryDatabaseAfterMs` and logs once
 * more when the database answers again.
 */
import type { Queryable } from '../db/knex.js'
import { RateLimitedError } from '../errors.js'
import type { Logger } from '../log.js'

/** The bucket refills completely over this period: the "per minute" of the limit. */
export const RATE_LIMIT_PERIOD_MS = 60_000
export const DEFAULT_DATABASE_TIMEOUT_MS = 1_000
export const DEFAULT_RETRY_DATABASE_AFTER_MS = 5_000
/** In-memory buckets kept before full ones (tat in the past) are swept. */
const MEMORY_SWEEP_SIZE = 10_000

export type RateLimitStore = 'database' | 'memory'

export interface AuthRateLimiterOptions {
  db: Queryable
  limitPerMinute: number
  logger: Logger
  now?: () => Date
  databaseTimeoutMs?: number
  retryDatabaseAfterMs?: number
  /** Names the limit in the 429's details; default "requests per minute to /auth/*". */
  describe?: string
}

export interface AuthRateLimiter {
  /** Counts one request by `clientKey`; throws RateLimitedError when it is over the limit. */
  hit(clientKey: string): Promise<void>
  /** Where requests are being counted right now. */
  readonly store: RateLimitStore
}

export interface BucketDecision {
  admitted: boolean
  /** The client's tat after this request (unchanged when refused), epoch ms. */
  tatMs: number
}

/** GCRA parameters for a limit of `limitPerMinute`: the cost of one request and the burst tolerance. */
export function gcra(limitPerMinute: number): { intervalMs: number; toleranceMs: number } {
  return { intervalMs: RATE_LIMIT_PERIOD_MS / limitPerMinute, toleranceMs: RATE_LIMIT_PERIOD_MS }
}

/** One request by the client at `nowMs`, decided and recorded by one atomic upsert. */
export async function takeFromBucket(db: Queryable, clientKey: string, nowMs: number, limitPerMinute: number): Promise<BucketDecision> {
  const { intervalMs, toleranceMs } = gcra(limitPerMinute)
  const base = db.raw('(CASE WHEN ?? > ? THEN ?? ELSE ? END)', ['auth_rate_buckets.tat_ms', nowMs, 'auth_rate_buckets.tat_ms', nowMs])
  const fits = db.raw('? + ? <= ?', [base, intervalMs, nowMs + toleranceMs])
  const rows = (await db('auth_rate_buckets')
    .insert({ client_key: clientKey, tat_ms: nowMs + intervalMs, admitted: 1 })
    .onConflict('client_key')
    .merge({
      // Every right-hand side reads the row as it was: both columns decide on the same tat.
      tat_ms: db.raw('CASE WHEN ? THEN ? + ? ELSE ?? END', [fits, base, intervalMs, 'auth_rate_buckets.tat_ms']),
      admitted: db.raw('CASE WHEN ? THEN 1 ELSE 0 END', [fits]),
    })
    .returning(['tat_ms', 'admitted'])) as Array<{ tat_ms: number | string; admitted: number | string | boolean }>
  const row = rows[0]
  if (!row) throw new Error('the rate-limit upsert returned no row')
  return { admitted: Number(row.admitted) === 1, tatMs: Number(row.tat_ms) }
}

/** Housekeeping: deletes buckets that are full again (tat before `before`); returns how many. */
export async function purgeFullBuckets(db: Queryable, before: Date): Promise<number> {
  return Number(await db('auth_rate_buckets').where('tat_ms', '<', before.getTime()).del())
}

/** The same GCRA in one process's memory. */
export class MemoryBuckets {
  private readonly tats = new Map<string, number>()
  constructor(private readonly limitPerMinute: number) {}

  take(clientKey: string, nowMs: number): BucketDecision {
    const { intervalMs, toleranceMs } = gcra(this.limitPerMinute)
    const base = Math.max(this.tats.get(clientKey) ?? nowMs, nowMs)
    if (base + intervalMs - nowMs > toleranceMs) return { admitted: false, tatMs: base }
    if (this.tats.size >= MEMORY_SWEEP_SIZE) this.sweep(nowMs)
    this.tats.set(clientKey, base + intervalMs)
    return { admitted: true, tatMs: base + intervalMs }
  }

  /** Whether the next request of the client would be refused, without taking anything. */
  isEmpty(clientKey: string, nowMs: number): { empty: boolean; tatMs: number } {
    const { intervalMs, toleranceMs } = gcra(this.limitPerMinute)
    const base = Math.max(this.tats.get(clientKey) ?? nowMs, nowMs)
    return { empty: base + intervalMs - nowMs > toleranceMs, tatMs: base }
  }

  clear(): void {
    this.tats.clear()
  }

  private sweep(nowMs: number): void {
    // A bucket whose tat has passed is full: the same as no entry.
    for (const [key, tat] of this.tats) if (tat <= nowMs) this.tats.delete(key)
  }
}

/** Whole seconds until a request fits again in a bucket whose tat is `tatMs`. */
export function retryAfterSeconds(tatMs: number, nowMs: number, limitPerMinute: number): number {
  const { intervalMs, toleranceMs } = gcra(limitPerMinute)
  return Math.max(1, Math.ceil((tatMs + intervalMs - toleranceMs - nowMs) / 1000))
}

export function createAuthRateLimiter(options: AuthRateLimiterOptions): AuthRateLimiter {
  const now = options.now ?? (() => new Date())
  const timeoutMs = options.databaseTimeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS
  const retryAfterMs = options.retryDatabaseAfterMs ?? DEFAULT_RETRY_DATABASE_AFTER_MS
  const describe = options.describe ?? 'requests per minute to /auth/*'
  const log = options.logger.child({ component: 'auth-rate-limit' })
  let store: RateLimitStore = 'database'
  let lastDatabaseFailure = 0
  const memory = new MemoryBuckets(options.limitPerMinute)

  const takeInDatabase = async (clientKey: string, nowMs: number): Promise<BucketDecision> => {
    let timer: NodeJS.Timeout | undefined
    const attempt = takeFromBucket(options.db, clientKey, nowMs, options.limitPerMinute)
    // After a timeout the query may still settle; its failure is expected, not unhandled.
    attempt.catch(() => undefined)
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)
    })
    try {
      return await Promise.race([attempt, deadline])
    } finally {
      clearTimeout(timer)
    }
  }

  return {
    get store() {
      return store
    },
    async hit(clientKey) {
      const nowMs = now().getTime()
      let decision: BucketDecision | undefined
      if (store === 'database' || nowMs - lastDatabaseFailure >= retryAfterMs) {
        try {
          decision = await takeInDatabase(clientKey, nowMs)
          if (store === 'memory') {
            store = 'database'
            memory.clear()
            log.info('rate limit counting is back in the database, shared by every auth-server instance')
          }
        } catch (err) {
          lastDatabaseFailure = nowMs
          if (store === 'database') {
            store = 'memory'
            log.warn({ err }, 'rate limit database unavailable: counting per instance in memory until it is back')
          }
        }
      }
      decision ??= memory.take(clientKey, nowMs)
      if (!decision.admitted) {
        const seconds = retryAfterSeconds(decision.tatMs, nowMs, options.limitPerMinute)
        throw new RateLimitedError('rate limit exceeded', seconds, `at most ${options.limitPerMinute} ${describe}; retry in ${seconds} s`)
      }
    },
  }
}
