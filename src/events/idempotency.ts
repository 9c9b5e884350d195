/**
 * The consumer idempotency store (payment service spec, "Events": "idempotency store keyed
 * `idempotency:{key}` with a configurable lifetime"). It lives in the consumer's own database so
 * that marking a message processed commits, or rolls back, with the handler's writes.
 *
 * A key is remembered for its lifetime (IDEMPOTENCY_KEY_TTL, default 7 days). An expired key
 * counts as not processed whether or not `purgeExpired` has deleted it yet, so behaviour does not
 * depend on when housekeeping last ran.
 */
import type { Queryable } from '../db/knex.js'
import { toDate } from '../db/dialect.js'
import { ConflictError, ValidationError } from '../errors.js'

export const IDEMPOTENCY_KEY_PREFIX = 'idempotency:'

/** The stored form of a key: `idempotency:{key}`. */
export function idempotencyKey(key: string): string {
  return IDEMPOTENCY_KEY_PREFIX + key
}

/** Another transaction marked the key first: the message was processed concurrently. */
export class AlreadyProcessedError extends ConflictError {
  constructor(readonly key: string) {
    super(`${idempotencyKey(key)} was already processed`)
  }
}

export interface ProcessedKey {
  key: string
  consumer: string
  processedAt: Date
  expiresAt: Date
}

/** The live (unexpired) record for `key`, if any. */
export async function findProcessed(db: Queryable, key: string, now: Date = new Date()): Promise<ProcessedKey | undefined> {
  const row = (await db('idempotency_keys')
    .where({ key: idempotencyKey(key) })
    .where('expires_at', '>', now)
    .first()) as Record<string, unknown> | undefined
  if (!row) return undefined
  return {
    key,
    consumer: String(row.consumer),
    processedAt: toDate(row.processed_at),
    expiresAt: toDate(row.expires_at),
  }
}

export async function isProcessed(db: Queryable, key: string, now: Date = new Date()): Promise<boolean> {
  return (await findProcessed(db, key, now)) !== undefined
}

/**
 * Records `key` as processed until `now + ttlMs`, in the caller's transaction. Throws
 * AlreadyProcessedError when a live record exists (on Postgres, after waiting for a concurrent
 * transaction holding the same key to commit), so the caller's transaction rolls back.
 */
export async function markProcessed(trx: Queryable, key: string, consumer: string, ttlMs: number, now: Date = new Date()): Promise<void> {
  if (!(ttlMs > 0)) throw new ValidationError(`idempotency lifetime must be positive, got ${ttlMs} ms`)
  // One statement: a new key is inserted, an expired one (not purged yet) taken over, a live
  // one left alone and nothing returned.
  const inserted = (await trx('idempotency_keys')
    .insert({ key: idempotencyKey(key), consumer, processed_at: now, expires_at: new Date(now.getTime() + ttlMs) })
    .onConflict('key')
    .merge(['consumer', 'processed_at', 'expires_at'])
    .where('idempotency_keys.expires_at', '<=', now)
    .returning('key')) as unknown[]
  if (inserted.length === 0) throw new AlreadyProcessedError(key)
}

/** Housekeeping: deletes expired keys; returns how many. */
export async function purgeExpired(db: Queryable, now: Date = new Date()): Promise<number> {
  return Number(await db('idempotency_keys').where('expires_at', '<=', now).del())
}
