/**
 * One PostgreSQL server for the whole run, with one migrated template database per schema;
 * each test clones a fresh database from a template (fast, isolated). Stopped at the end.
 */
import type { TestProject } from 'vitest/node'
import { createDatabase } from '../../src/db/knex.js'
import { migrateLatest, DATABASE_NAMES } from '../../src/db/migrate.js'
import { adminQuery, databaseUrl, startPostgres, type PostgresServer } from './postgres.js'
import { templateName } from './templates.js'

let server: PostgresServer | undefined

export async function setup(project: TestProject): Promise<void> {
  server = await startPostgres()
  for (const name of DATABASE_NAMES) {
    const template = templateName(name)
    await adminQuery(server.url, `DROP DATABASE IF EXISTS ${template}`)
    await adminQuery(server.url, `CREATE DATABASE ${template}`)
    const db = createDatabase(databaseUrl(server.url, template))
    try {
      await migrateLatest(db, name)
    } finally {
      await db.destroy()
    }
  }
  project.provide('postgresUrl', server.url)
}

export async function teardown(): Promise<void> {
  await server?.stop()
}

declare module 'vitest' {
  export interface ProvidedContext {
    postgresUrl: string
  }
}
