/**
 * The auth server's rate limit (spec: "Auth server rate limit: AUTH_RATE_LIMIT_PER_MINUTE,
 * default 20, shared across instances; if the shared store is unavailable it falls back to
 * per-instance counting").
 *
 * Fixed one-minute windows per client, counted in `auth_rate_limits` with one atomic upsert
 * (`INSERT … ON CONFLICT DO UPDATE SET count = count + 1 RETURNING count`), so every instance on
 * one database draws from the same budget. A request over the budget gets 429 with Retry-After
 * (the seconds left in the window); refused requests count too, so hammering does not help.
 *
 * When counting in the database fails or takes longer than `databaseTimeoutMs`, the limiter
 * counts in this process's memory instead (each instance then allows the limit on its own),
 * logs that once, and keeps serving; it tries the database again every `retryDatabaseAfterMs`
 * and logs once more when the database answers again.
 */
import type { Db, Queryable } from '../db/knex.js'
import { RateLimitedError } from '../errors.js'
import type { Logger } from '../log.js'

export const RATE_LIMIT_WINDOW_MS = 60_000
export const DEFAULT_DATABASE_TIMEOUT_MS = 1_000
export const DEFAULT_RETRY_DATABASE_AFTER_MS = 5_000

export type RateLimitStore = 'database' | 'memory'

export interface AuthRateLimiterOptions {
  db: Db
  limitPerMinute: number
  logger: Logger
  now?: () => Date
  databaseTimeoutMs?: number
  retryDatabaseAfterMs?: number
}

export interface AuthRateLimiter {
  /** Counts one request by `clientKey`; throws RateLimitedError when it is over the limit. */
  hit(clientKey: string): Promise<void>
  /** Where requests are being counted right now. */
  readonly store: RateLimitStore
}

/** One more request by the client in the window; returns the window's count so far. */
export async function incrementRateLimitCount(db: Queryable, clientKey: string, windowStart: Date): Promise<number> {
  const rows = (await db('auth_rate_limits')
    .insert({ client_key: clientKey, window_start: windowStart, count: 1 })
    .onConflict(['client_key', 'window_start'])
    .merge({ count: db.raw('?? + 1', ['auth_rate_limits.count']) })
    .returning('count')) as Array<{ count: number | string }>
  return Number(rows[0]?.count)
}

/** Housekeeping: deletes windows that started before `before`; returns how many. */
export async function purgeRateLimitWindows(db: Queryable, before: Date): Promise<number> {
  return Number(await db('auth_rate_limits').where('window_start', '<', before).del())
}

export function createAuthRateLimiter(options: AuthRateLimiterOptions): AuthRateLimiter {
  const now = options.now ?? (() => new Date())
  const timeoutMs = options.databaseTimeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS
  const retryAfterMs = options.retryDatabaseAfterMs ?? DEFAULT_RETRY_DATABASE_AFTER_MS
  const log = options.logger.child({ component: 'auth-rate-limit' })
  let store: RateLimitStore = 'database'
  let lastDatabaseFailure = 0
  const memory = new Map<string, { windowStart: number; count: number }>()
  let memoryWindow = 0

  const countInMemory = (clientKey: string, windowStart: number): number => {
    if (windowStart !== memoryWindow) {
      // A new window: every older count is dead; dropping them bounds the map.
      memory.clear()
      memoryWindow = windowStart
    }
    const entry = memory.get(clientKey) ?? { windowStart, count: 0 }
    entry.count += 1
    memory.set(clientKey, entry)
    return entry.count
  }

  const countInDatabase = async (clientKey: string, windowStart: Date): Promise<number> => {
    let timer: NodeJS.Timeout | undefined
    const attempt = incrementRateLimitCount(options.db, clientKey, windowStart)
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
      const at = now()
      const windowStart = Math.floor(at.getTime() / RATE_LIMIT_WINDOW_MS) * RATE_LIMIT_WINDOW_MS
      let count: number | undefined
      if (store === 'database' || at.getTime() - lastDatabaseFailure >= retryAfterMs) {
        try {
          count = await countInDatabase(clientKey, new Date(windowStart))
          if (store === 'memory') {
            store = 'database'
            memory.clear()
            log.info('rate limit counting is back in the database, shared by every auth-server instance')
          }
        } catch (err) {
          lastDatabaseFailure = at.getTime()
          if (store === 'database') {
            store = 'memory'
            log.warn({ err }, 'rate limit database unavailable: counting per instance in memory until it is back')
          }
        }
      }
      count ??= countInMemory(clientKey, windowStart)
      if (count > options.limitPerMinute) {
        const retryAfterSeconds = Math.max(1, Math.ceil((windowStart + RATE_LIMIT_WINDOW_MS - at.getTime()) / 1000))
        throw new RateLimitedError(
          'rate limit exceeded',
          retryAfterSeconds,
          `at most ${options.limitPerMinute} requests per minute to /auth/*; retry in ${retryAfterSeconds} s`,
        )
      }
    },
  }
}
