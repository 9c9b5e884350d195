/** Fresh, migrated benchmark databases on both dialects, dropped afterwards. */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createDatabase, type Db } from '../src/db/knex.js'
import { migrateLatest, type DatabaseName } from '../src/db/migrate.js'
import { adminQuery, databaseUrl } from '../test/helpers/postgres.js'

export type Dialect = 'sqlite' | 'postgres'

export interface BenchDatabase {
  dialect: Dialect
  url: string
  db: Db
  drop(): Promise<void>
}

export async function benchDatabase(dialect: Dialect, postgresUrl: string, name: DatabaseName = 'control-plane'): Promise<BenchDatabase> {
  if (dialect === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-'))
    const url = `sqlite://${path.join(dir, 'bench.db')}`
    const db = createDatabase(url)
    await migrateLatest(db, name)
    return { dialect, url, db, drop: async () => (await db.destroy(), fs.rmSync(dir, { recursive: true, force: true })) }
  }
  const database = `np_bench_${crypto.randomBytes(5).toString('hex')}`
  await adminQuery(postgresUrl, `CREATE DATABASE ${database}`)
  const url = databaseUrl(postgresUrl, database)
  const db = createDatabase(url)
  await migrateLatest(db, name)
  return {
    dialect,
    url,
    db,
    drop: async () => {
      await db.destroy()
      await adminQuery(postgresUrl, `DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    },
  }
}
