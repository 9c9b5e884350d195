/**
 * A fresh database per test, on either dialect: SQLite is a new file in a temp dir; Postgres
 * a new database cloned from the migrated template (or empty, for migration tests).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, inject } from 'vitest'
import { createDatabase, type Db } from '../../src/db/knex.js'
import type { DatabaseName } from '../../src/db/migrate.js'
import { adminQuery, databaseUrl } from './postgres.js'
import { templateName } from './templates.js'

export type Dialect = 'sqlite' | 'postgres'
export const DIALECTS: readonly Dialect[] = ['sqlite', 'postgres']

/**
 * `describe.each(DIALECTS)` whose two suites run at the same time, each one's tests still in
 * order: for files that mostly wait on agents, chains and timers, so the halves' waits overlap
 * instead of adding up. Their tests must not change process-wide state (environment, working
 * directory, fake timers) nor use the global `onTestFailed` (it would attach to whichever test
 * started last).
 */
export function describeEachDialectConcurrently(name: string, body: (dialect: Dialect) => void): void {
  for (const dialect of DIALECTS) {
    const suite = describe(name.replace('%s', dialect), () => body(dialect)).suite
    if (suite) suite.concurrent = true
  }
}

export interface TestDatabase {
  dialect: Dialect
  url: string
  db: Db
  /** Opens another, independent connection pool on the same database. */
  connect(): Db
  destroy(): Promise<void>
}

export interface TestDatabaseOptions {
  database?: DatabaseName
  migrated?: boolean
}

export async function createTestDatabase(dialect: Dialect, options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const database = options.database ?? 'control-plane'
  const migrated = options.migrated ?? true
  const pools: Db[] = []
  const connect = (url: string) => () => {
    const db = createDatabase(url)
    pools.push(db)
    return db
  }

  if (dialect === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-sqlite-'))
    const url = `sqlite://${path.join(dir, `${database}.db`)}`
    // A copy of the migrated template file (global-setup.ts) costs a few ms; migrating, ~100 ms.
    if (migrated) fs.copyFileSync(inject('sqliteTemplates')[database], path.join(dir, `${database}.db`))
    const open = connect(url)
    const db = open()
    return {
      dialect,
      url,
      db,
      connect: open,
      async destroy() {
        await Promise.all(pools.map((p) => p.destroy()))
        fs.rmSync(dir, { recursive: true, force: true })
      },
    }
  }

  const serverUrl = inject('postgresUrl')
  const name = `np_test_${crypto.randomBytes(6).toString('hex')}`
  const template = migrated ? ` TEMPLATE ${templateName(database)}` : ''
  await retry(() => adminQuery(serverUrl, `CREATE DATABASE ${name}${template}`))
  const url = databaseUrl(serverUrl, name)
  const open = connect(url)
  return {
    dialect,
    url,
    db: open(),
    connect: open,
    async destroy() {
      await Promise.all(pools.map((p) => p.destroy()))
      await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    },
  }
}

/** Two clones of one template at the same instant can collide; a short retry absorbs it. */
async function retry(fn: () => Promise<void>, attempts = 10): Promise<void> {
  for (let i = 1; ; i++) {
    try {
      return await fn()
    } catch (err) {
      if (i >= attempts || !/being accessed by other users/.test(String(err))) throw err
      await new Promise((r) => setTimeout(r, 50 * i))
    }
  }
}
