import { UnavailableError } from '../errors.js'
import { parseDatabaseUrl, redactDatabaseUrl } from './url.js'

/**
 * Fails fast with the driver's own reason when a Postgres server cannot be reached; the knex
 * pool would instead retry until its acquire timeout and report only "timeout acquiring".
 */
export async function probeDatabase(url: string, timeoutMs = 5_000): Promise<void> {
  const target = parseDatabaseUrl(url)
  if (target.client !== 'postgres') return
  // Loaded only for Postgres: most commands run against SQLite and never need the driver.
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: target.connectionString, connectionTimeoutMillis: timeoutMs })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.query('select 1')
  } catch (err) {
    throw new UnavailableError(
      `cannot reach the database at ${redactDatabaseUrl(url)}: ${(err as Error).message}`,
      'check the URL and that the Postgres server is running and accepts connections',
    )
  } finally {
    await client.end().catch(() => {})
  }
}
