import fs from 'node:fs'
import path from 'node:path'
import knexFactory, { type Knex } from 'knex'
import type BetterSqlite3 from 'better-sqlite3'
import type { Logger } from '../log.js'
import { parseDatabaseUrl, type DatabaseTarget } from './url.js'

export type Db = Knex
export type Tx = Knex.Transaction
/** A connection or a transaction: every storage function takes one of these first. */
export type Queryable = Knex | Knex.Transaction

export interface DatabaseOptions {
  /** Postgres pool size; SQLite always uses one connection (single writer). */
  poolMax?: number
  /** SQLite busy timeout in ms, for other processes holding the write lock. */
  busyTimeoutMs?: number
  applicationName?: string
  /** Where the driver's own warnings go (a dropped connection, a pool error); default: stderr. */
  logger?: Logger
}

function knexLog(logger: Logger | undefined): Knex.Config['log'] {
  if (!logger) return undefined
  const log = logger.child({ component: 'database' })
  return {
    warn: (message: unknown) => log.warn({ detail: String(message) }, 'database driver warning'),
    error: (message: unknown) => log.error({ detail: String(message) }, 'database driver error'),
    deprecate: (method: unknown, alternative: unknown) => log.warn({ method, alternative }, 'deprecated database call'),
    debug: (message: unknown) => log.debug({ detail: String(message) }, 'database driver debug'),
  }
}

export function createDatabase(url: string, options: DatabaseOptions = {}): Db {
  return createDatabaseFor(parseDatabaseUrl(url), options)
}

export function createDatabaseFor(target: DatabaseTarget, options: DatabaseOptions = {}): Db {
  if (target.client === 'sqlite') {
    fs.mkdirSync(path.dirname(target.filename), { recursive: true })
    const busyTimeout = options.busyTimeoutMs ?? 10_000
    return beginImmediate(knexFactory({
      client: 'better-sqlite3',
      connection: { filename: target.filename },
      useNullAsDefault: true,
      log: knexLog(options.logger),
      // better-sqlite3 is synchronous: one connection serialises this process's writers, so
      // SQLITE_BUSY can only come from another process, which busy_timeout absorbs (transactions
      // take the write lock when they begin: beginImmediate).
      pool: {
        min: 1,
        max: 1,
        afterCreate(conn: BetterSqlite3.Database, done: (err: Error | null, conn: unknown) => void) {
          try {
            conn.pragma(`busy_timeout = ${busyTimeout}`)
            conn.pragma('journal_mode = WAL')
            conn.pragma('synchronous = NORMAL')
            conn.pragma('foreign_keys = ON')
            // Deleted rows are overwritten with zeros, not left in free space: a deleted key or
            // sealed secret must not be readable from a copy of the file (docs/secrets.md).
            conn.pragma('secure_delete = ON')
            cachePreparedStatements(conn)
            done(null, conn)
          } catch (err) {
            done(err as Error, conn)
          }
        },
      },
      acquireConnectionTimeout: 60_000,
    }))
  }
  return knexFactory({
    client: 'pg',
    connection: {
      connectionString: target.connectionString,
      application_name: options.applicationName ?? 'nodeplane',
    },
    pool: { min: 0, max: options.poolMax ?? 10 },
    log: knexLog(options.logger),
    acquireConnectionTimeout: 30_000,
  })
}

/**
 * knex prepares every SQLite statement anew (~15% of a small transaction, measured by
 * `npm run bench`); the same SQL text reuses its prepared statement instead. Safe because
 * better-sqlite3 runs a statement to completion synchronously, and SQLite re-prepares a
 * statement itself after a schema change.
 */
function cachePreparedStatements(conn: BetterSqlite3.Database, max = 500): void {
  const prepare = conn.prepare.bind(conn)
  const cache = new Map<string, BetterSqlite3.Statement>()
  conn.prepare = ((source: string) => {
    const cached = cache.get(source)
    if (cached) {
      cache.delete(source)
      cache.set(source, cached)
      // knex sets this per query only when asked; a reused statement starts from the default.
      return cached.safeIntegers(false)
    }
    const statement = prepare(source)
    cache.set(source, statement)
    if (cache.size > max) cache.delete(cache.keys().next().value as string)
    return statement
  }) as typeof conn.prepare
}

export { dialectOf } from './dialect.js'

interface SqliteTransaction {
  begin(conn: unknown): Promise<unknown>
  query(conn: unknown, sql: string): Promise<unknown>
}

/**
 * SQLite transactions begin IMMEDIATE. knex begins them DEFERRED, as readers: one that reads and
 * then writes while another process (the CLI beside `nodeplane up`) has written since its read
 * gets SQLITE_BUSY at once, without waiting out busy_timeout, since its snapshot is stale. Taking
 * the write lock at BEGIN waits for the other writer instead. Nested transactions are savepoints
 * and never begin.
 */
function beginImmediate(db: Db): Db {
  const client = db.client as { transaction: (...args: unknown[]) => SqliteTransaction }
  const transaction = client.transaction.bind(client)
  client.transaction = (...args: unknown[]) => {
    const trx = transaction(...args)
    // Safe to set after construction: begin runs only once a connection has been acquired (async).
    trx.begin = (conn) => trx.query(conn, 'BEGIN IMMEDIATE;')
    return trx
  }
  return db
}
