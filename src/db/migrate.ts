/**
 * Migrations run as their own step (`nodeplane db migrate`) before services start. They are
 * idempotent and safe when two processes run them at once: Postgres serialises runners with a
 * session advisory lock (released by the server if the holder dies); SQLite with a lock file
 * beside the database (stale after the holder stops refreshing it).
 */
import type { Knex } from 'knex'
import { controlPlaneMigrations } from '../../migrations/control-plane/index.js'
import { paymentsMigrations } from '../../migrations/payments/index.js'
import { dialectOf } from './dialect.js'
import type { Db } from './knex.js'

export type DatabaseName = 'control-plane' | 'payments'
export const DATABASE_NAMES: readonly DatabaseName[] = ['control-plane', 'payments']

export interface Migration {
  name: string
  up(knex: Knex): Promise<void>
  down(knex: Knex): Promise<void>
}

const SOURCES: Record<DatabaseName, { migrations: readonly Migration[]; tableName: string; lockKey: number }> = {
  'control-plane': { migrations: controlPlaneMigrations, tableName: 'cp_migrations', lockKey: 0x6e70_0001 },
  payments: { migrations: paymentsMigrations, tableName: 'payments_migrations', lockKey: 0x6e70_0002 },
}

function migratorConfig(name: DatabaseName): Knex.MigratorConfig {
  const source = SOURCES[name]
  return {
    tableName: source.tableName,
    migrationSource: {
      getMigrations: async () => [...source.migrations],
      getMigrationName: (migration: Migration) => migration.name,
      getMigration: async (migration: Migration) => migration,
    },
  }
}

export interface MigrationStatus {
  database: DatabaseName
  applied: string[]
  pending: string[]
}

export async function migrationStatus(db: Db, name: DatabaseName): Promise<MigrationStatus> {
  const [completed, pending] = (await db.migrate.list(migratorConfig(name))) as [
    Array<{ name: string }>,
    Migration[],
  ]
  return { database: name, applied: completed.map((m) => m.name), pending: pending.map((m) => m.name) }
}

export async function migrateLatest(db: Db, name: DatabaseName): Promise<{ applied: string[] }> {
  return withMigrationLock(db, name, async () => {
    const config = migratorConfig(name)
    // Under our own lock nobody else is migrating, so a knex lock row left set by a runner
    // that crashed can be cleared safely.
    await db.migrate.forceFreeMigrationsLock(config)
    const [, applied] = (await db.migrate.latest(config)) as [number, string[]]
    return { applied }
  })
}

async function withMigrationLock<T>(db: Db, name: DatabaseName, fn: () => Promise<T>): Promise<T> {
  if (dialectOf(db) === 'postgres') {
    const key = SOURCES[name].lockKey
    const client = db.client as { acquireConnection(): Promise<unknown>; releaseConnection(c: unknown): Promise<void> }
    const conn = await client.acquireConnection()
    try {
      await db.raw('select pg_advisory_lock(?)', [key]).connection(conn)
      try {
        return await fn()
      } finally {
        await db.raw('select pg_advisory_unlock(?)', [key]).connection(conn)
      }
    } finally {
      await client.releaseConnection(conn)
    }
  }
  // Loaded here, for SQLite's lock only: it also installs process signal and exit hooks.
  const { default: lockfile } = await import('proper-lockfile')
  const release = await lockfile.lock(`${sqliteFilename(db)}.migrate`, {
    realpath: false,
    stale: 15_000,
    update: 5_000,
    retries: { retries: 120, minTimeout: 100, maxTimeout: 1_000 },
  })
  try {
    return await fn()
  } finally {
    await release()
  }
}

function sqliteFilename(db: Db): string {
  const connection = (db.client as { config: { connection: { filename: string } } }).config.connection
  return connection.filename
}
