/** Operator-level database actions behind `nodeplane db …` and `nodeplane up`. */
import { createDatabase } from './knex.js'
import { migrateLatest, migrationStatus, type DatabaseName } from './migrate.js'
import { probeDatabase } from './probe.js'
import { parseDatabaseUrl, redactDatabaseUrl } from './url.js'

export interface DatabaseUrls {
  DATABASE_URL: string
  PAYMENTS_DATABASE_URL: string
}

export function urlFor(urls: DatabaseUrls, name: DatabaseName): string {
  return name === 'control-plane' ? urls.DATABASE_URL : urls.PAYMENTS_DATABASE_URL
}

export interface MigrateReport {
  database: DatabaseName
  url: string
  applied: string[]
}

export async function migrateDatabases(urls: DatabaseUrls, names: readonly DatabaseName[]): Promise<MigrateReport[]> {
  const reports: MigrateReport[] = []
  for (const name of names) {
    const url = urlFor(urls, name)
    await probeDatabase(url)
    const db = createDatabase(url, { poolMax: 2, applicationName: 'nodeplane-migrate' })
    try {
      const { applied } = await migrateLatest(db, name)
      reports.push({ database: name, url: redactDatabaseUrl(url), applied })
    } finally {
      await db.destroy()
    }
  }
  return reports
}

export interface StatusReport {
  database: DatabaseName
  url: string
  dialect: 'sqlite' | 'postgres'
  applied: string[]
  pending: string[]
}

export async function databaseStatus(urls: DatabaseUrls, names: readonly DatabaseName[]): Promise<StatusReport[]> {
  const reports: StatusReport[] = []
  for (const name of names) {
    const url = urlFor(urls, name)
    await probeDatabase(url)
    const target = parseDatabaseUrl(url)
    const db = createDatabase(url, { poolMax: 1, applicationName: 'nodeplane-status' })
    try {
      const status = await migrationStatus(db, name)
      reports.push({ database: name, url: redactDatabaseUrl(url), dialect: target.client, applied: status.applied, pending: status.pending })
    } finally {
      await db.destroy()
    }
  }
  return reports
}
