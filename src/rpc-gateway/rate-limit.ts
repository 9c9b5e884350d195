/**
 * Per-API-key request rate of the rpc-gateway (docs/rpc-gateway.md, "Limits"): a token bucket
 * (RPC_GATEWAY_RATE_LIMIT_PER_SECOND refill, RPC_GATEWAY_RATE_LIMIT_BURST size) kept in the
 * `rpc_rate_buckets` table, so every gateway on one database draws from the same bucket. A batch
 * takes one token per call.
 *
 * One cycle: a request takes its tokens from what this gateway leased from the bucket before; if
 * that is not enough it locks the key's row (FOR UPDATE on Postgres; SQLite has one writer),
 * refills it for the time elapsed, takes what it needs plus a small lease for its next requests
 * (`leaseTokens`, a twentieth of a second's refill), and writes the row back. Leased tokens
 * expire after LEASE_MS, so a gateway can run ahead of the shared bucket by at most its lease, and
 * only for that long. A process that dies loses at most its lease. Calls for a key that arrive while
 * this gateway's database take for that key is in flight wait for it and draw on its lease (or share
 * its refusal): without that, a burst of concurrent calls would each lease tokens and drain the
 * bucket many times faster than they spend it.
 *
 * When the database fails or takes longer than `databaseTimeoutMs`, buckets are kept in this
 * process's memory instead (each gateway then allows the rate on its own), logged once; the
 * database is tried again every `retryDatabaseAfterMs`, as the auth server's limit does.
 */
import type { Db, Queryable } from '../db/knex.js'
import { lockRow } from '../db/dialect.js'
import type { Logger } from '../log.js'

export const LEASE_MS = 1_000
export const DEFAULT_DATABASE_TIMEOUT_MS = 1_000
export const DEFAULT_RETRY_DATABASE_AFTER_MS = 5_000
/** In-process buckets kept at most (the fallback and the leases); beyond it the oldest are dropped. */
const MAX_LOCAL_BUCKETS = 100_000

export type RateDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number }

export interface RpcRateLimiterOptions {
  db: Db
  perSecond: number
  burst: number
  logger: Logger
  /** Epoch milliseconds. */
  now?: () => number
  databaseTimeoutMs?: number
  retryDatabaseAfterMs?: number
}

export interface RpcRateLimiter {
  /** Takes `count` tokens from `key`'s bucket. */
  take(key: string, count: number): Promise<RateDecision>
  readonly store: 'database' | 'memory'
}

interface Bucket {
  tokens: number
  at: number
}

/** The bucket refilled up to `at`. */
function refill(bucket: Bucket, at: number, perMs: number, capacity: number): number {
  return Math.min(capacity, bucket.tokens + Math.max(0, at - bucket.at) * perMs)
}

function retryAfter(missing: number, perMs: number): number {
  return Math.max(1, Math.ceil(missing / perMs / 1000))
}

/**
 * Takes `count` plus up to `lease` tokens from the shared bucket of `key`; returns how many were
 * taken (0: not enough for `count`) and what is left. Call inside a transaction.
 */
export async function takeFromSharedBucket(
  trx: Queryable,
  key: string,
  count: number,
  lease: number,
  at: number,
  limits: { perMs: number; capacity: number },
): Promise<{ taken: number; left: number }> {
  let row = (await lockRow(trx, trx('rpc_rate_buckets').where({ bucket_key: key }).first('tokens', 'updated_at_ms'))) as
    | { tokens: number | string; updated_at_ms: number | string }
    | undefined
  if (!row) {
    await trx('rpc_rate_buckets').insert({ bucket_key: key, tokens: limits.capacity, updated_at_ms: at }).onConflict('bucket_key').ignore()
    row = (await lockRow(trx, trx('rpc_rate_buckets').where({ bucket_key: key }).first('tokens', 'updated_at_ms'))) as { tokens: number | string; updated_at_ms: number | string }
  }
  const available = refill({ tokens: Number(row.tokens), at: Number(row.updated_at_ms) }, at, limits.perMs, limits.capacity)
  const taken = available >= count ? Math.min(count + lease, Math.floor(available)) : 0
  const left = available - taken
  await trx('rpc_rate_buckets').where({ bucket_key: key }).update({ tokens: left, updated_at_ms: Math.max(at, Number(row.updated_at_ms)) })
  return { taken, left }
}

/** Housekeeping: rows untouched since `before` (a full bucket is the same as no row). */
export async function purgeIdleBuckets(db: Queryable, before: number): Promise<number> {
  return Number(await db('rpc_rate_buckets').where('updated_at_ms', '<', before).del())
}

export function createRpcRateLimiter(options: RpcRateLimiterOptions): RpcRateLimiter {
  const now = options.now ?? Date.now
  const capacity = options.burst
  const perMs = options.perSecond / 1000
  const lease = Math.floor(options.perSecond / 20)
  const timeoutMs = options.databaseTimeoutMs ?? DEFAULT_DATABASE_TIMEOUT_MS
  const retryDatabaseAfterMs = options.retryDatabaseAfterMs ?? DEFAULT_RETRY_DATABASE_AFTER_MS
  const log = options.logger.child({ component: 'rpc-rate-limit' })
  let store: 'database' | 'memory' = 'database'
  let lastFailure = 0
  // Tokens leased from the shared bucket, each batch valid until `until`.
  const leases = new Map<string, { tokens: number; until: number }>()
  // The database take in flight per key, which concurrent calls for that key wait for: its count
  // and decision (undefined when the database failed).
  const inflight = new Map<string, Promise<{ count: number; decision: RateDecision } | undefined>>()
  // The fallback's buckets, used only while the database is unavailable.
  const memory = new Map<string, Bucket>()

  const bounded = <V>(map: Map<string, V>, key: string, value: V) => {
    map.delete(key)
    if (map.size >= MAX_LOCAL_BUCKETS) map.delete(map.keys().next().value as string)
    map.set(key, value)
  }

  const takeInMemory = (key: string, count: number, at: number): RateDecision => {
    const bucket = memory.get(key) ?? { tokens: capacity, at }
    const tokens = refill(bucket, at, perMs, capacity)
    if (tokens >= count) {
      bounded(memory, key, { tokens: tokens - count, at })
      return { allowed: true }
    }
    bounded(memory, key, { tokens, at })
    return { allowed: false, retryAfterSeconds: retryAfter(count - tokens, perMs) }
  }

  const takeInDatabase = async (key: string, count: number, at: number): Promise<RateDecision> => {
    let timer: NodeJS.Timeout | undefined
    const attempt = options.db.transaction((trx) => takeFromSharedBucket(trx, key, count, lease, at, { perMs, capacity }))
    attempt.catch(() => undefined)
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)
    })
    try {
      const { taken, left } = await Promise.race([attempt, deadline])
      if (taken === 0) return { allowed: false, retryAfterSeconds: retryAfter(count - left, perMs) }
      if (taken > count) bounded(leases, key, { tokens: taken - count, until: at + LEASE_MS })
      return { allowed: true }
    } finally {
      clearTimeout(timer)
    }
  }

  return {
    get store() {
      return store
    },
    async take(key, count) {
      let at = now()
      for (;;) {
        const leased = leases.get(key)
        if (leased && leased.until > at && leased.tokens >= count) {
          leased.tokens -= count
          return { allowed: true }
        }
        const running = inflight.get(key)
        if (!running) break
        // Refused for as many tokens or fewer: so is this call, without a database trip of its own
        // (a flood on an empty bucket would otherwise queue one trip per call, one after another).
        const outcome = await running
        if (outcome && !outcome.decision.allowed && count >= outcome.count) return outcome.decision
        at = now()
      }
      leases.delete(key)
      if (store === 'database' || at - lastFailure >= retryDatabaseAfterMs) {
        try {
          const taking = takeInDatabase(key, count, at)
          const settled = taking.then(
            (decision) => ({ count, decision }),
            () => undefined,
          )
          inflight.set(key, settled)
          void settled.then(() => {
            if (inflight.get(key) === settled) inflight.delete(key)
          })
          const decision = await taking
          if (store === 'memory') {
            store = 'database'
            memory.clear()
            log.info('rpc rate limit counting is back in the database, shared by every gateway')
          }
          return decision
        } catch (err) {
          lastFailure = at
          if (store === 'database') {
            store = 'memory'
            log.warn({ err }, 'rpc rate limit database unavailable: counting per gateway in memory until it is back')
          }
        }
      }
      return takeInMemory(key, count, at)
    },
  }
}
