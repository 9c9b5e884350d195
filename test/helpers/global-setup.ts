/**
 * One PostgreSQL server for the whole run, with one migrated template database per schema, and
 * one migrated SQLite template file per schema; each test clones a fresh database from a
 * template (fast, isolated). Stopped and removed at the end.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { TestProject } from 'vitest/node'
import { createDatabase } from '../../src/db/knex.js'
import { migrateLatest, DATABASE_NAMES, type DatabaseName } from '../../src/db/migrate.js'
import { adminQuery, databaseUrl, startPostgres, type PostgresServer } from './postgres.js'
import { templateName } from './templates.js'

interface SharedSetup {
  server: PostgresServer
  sqliteDir: string
  sqliteTemplates: Record<DatabaseName, string>
}

async function startShared(): Promise<SharedSetup> {
  const server = await startPostgres()
  const sqliteDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-sqlite-templates-'))
  const sqliteTemplates = {} as Record<DatabaseName, string>
  try {
    for (const name of DATABASE_NAMES) {
      const template = templateName(name)
      await adminQuery(server.url, `DROP DATABASE IF EXISTS ${template}`)
      await adminQuery(server.url, `CREATE DATABASE ${template}`)
      const file = path.join(sqliteDir, `${name}.db`)
      for (const url of [databaseUrl(server.url, template), `sqlite://${file}`]) {
        const db = createDatabase(url)
        try {
          await migrateLatest(db, name)
        } finally {
          // Closing the last SQLite connection checkpoints the WAL into the file a test copies.
          await db.destroy()
        }
      }
      sqliteTemplates[name] = file
    }
  } catch (err) {
    await server.stop()
    fs.rmSync(sqliteDir, { recursive: true, force: true })
    throw err
  }
  return { server, sqliteDir, sqliteTemplates }
}

/**
 * Every project of vitest.config.ts (the two pools) runs this setup, each with its own copy of
 * this module: they share one server through the main process's globalThis, and the last project
 * to finish stops it.
 */
const SHARED = Symbol.for('nodeplane.test.sharedSetup')
type SharedSlot = { setup: Promise<SharedSetup>; users: number }
const slots = globalThis as unknown as { [SHARED]?: SharedSlot }

export async function setup(project: TestProject): Promise<() => Promise<void>> {
  const slot = (slots[SHARED] ??= { setup: startShared(), users: 0 })
  slot.users++
  const shared = await slot.setup
  project.provide('postgresUrl', shared.server.url)
  project.provide('sqliteTemplates', shared.sqliteTemplates)
  return async () => {
    if (--slot.users > 0) return
    delete slots[SHARED]
    await shared.server.stop()
    fs.rmSync(shared.sqliteDir, { recursive: true, force: true })
  }
}

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string
    sqliteTemplates: Record<DatabaseName, string>
  }
}
