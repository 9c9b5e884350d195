/**
 * The one place that knows the two dialects apart (STYLE.md, Storage). SQLite stores
 * timestamps as epoch milliseconds (knex binds Date as a number there), booleans as 0/1 and
 * JSON as text; Postgres uses timestamptz, boolean and jsonb.
 */
import type { Knex } from 'knex'
import type { Queryable } from './knex.js'

/**
 * Which dialect a connection speaks. Here rather than in knex.ts (which re-exports it) so that
 * modules needing only these helpers do not load knex itself.
 */
export function dialectOf(db: Queryable): 'sqlite' | 'postgres' {
  const name = (db.client as { config: { client: unknown } }).config.client
  return name === 'pg' ? 'postgres' : 'sqlite'
}

export function isPostgres(db: Queryable): boolean {
  return dialectOf(db) === 'postgres'
}

/** Row locking for claim-and-update inside a transaction; SQLite is single-writer already. */
export function lockForClaim<T extends Knex.QueryBuilder>(db: Queryable, qb: T): T {
  return isPostgres(db) ? (qb.forUpdate().skipLocked() as T) : qb
}

export function toDate(value: unknown): Date {
  if (value instanceof Date) return value
  if (typeof value === 'number' || typeof value === 'bigint') return new Date(Number(value))
  if (typeof value === 'string') {
    return /^\d+$/.test(value) ? new Date(Number(value)) : new Date(value)
  }
  throw new TypeError(`not a timestamp: ${String(value)}`)
}

export function toDateOrNull(value: unknown): Date | null {
  return value === null || value === undefined ? null : toDate(value)
}

export function toBool(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 't' || value === 'true'
}

/**
 * After deleting secrets: SQLite (with `secure_delete`, src/db/knex.ts) has zeroed them in the
 * database file, but the write-ahead log still holds the pages as they were until a checkpoint;
 * a TRUNCATE checkpoint copies the zeroed pages back and empties the log. Best effort: a reader
 * holding an old snapshot makes it return busy, and the next one does it. Postgres keeps dead
 * rows until VACUUM and its WAL until recycled: documented (docs/secrets.md), not done here.
 */
export async function forgetDeletedRows(db: Queryable): Promise<void> {
  if (isPostgres(db)) return
  await db.raw('PRAGMA wal_checkpoint(TRUNCATE)')
}

/** Value to bind into a json/jsonb column. */
export function toJson(value: unknown): string {
  return JSON.stringify(value)
}

export function fromJson<T = unknown>(value: unknown): T {
  return (typeof value === 'string' ? JSON.parse(value) : value) as T
}

/** Rows affected by an update/delete, whichever driver answered. */
export function affectedRows(result: unknown): number {
  if (typeof result === 'number') return result
  if (Array.isArray(result)) return result.length
  return 0
}

/** Locks a row for the rest of the transaction (Postgres); SQLite has one writer already. */
export function lockRow<T extends Knex.QueryBuilder>(db: Queryable, qb: T): T {
  return isPostgres(db) ? (qb.forUpdate() as T) : qb
}
