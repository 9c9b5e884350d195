/**
 * For operator commands that act on the control-plane database directly (bootstrap and
 * break-glass): open it from DATABASE_URL (default: the SQLite file in the data dir), refuse an
 * old schema, run the work, and always close the pool so the command exits.
 */
import { databaseCommandEnv, type Env } from '../config/env.js'
import { createDatabase, type Db } from '../db/knex.js'
import { probeDatabase } from '../db/probe.js'
import { assertSchemaCurrent } from '../db/schema-check.js'
import { createLogger } from '../log.js'
import { loadSettingsWithSecrets } from '../secrets/load-settings.js'

export async function withControlPlaneDatabase<T>(env: Env, work: (db: Db) => Promise<T>): Promise<T> {
  // DATABASE_URL may be a file or a Vault reference (docs/secrets.md); Vault's messages go to stderr, never into --json.
  const { config, secrets } = await loadSettingsWithSecrets(databaseCommandEnv, env, () => createLogger({ level: 'warn', destination: process.stderr }))
  await secrets.close()
  await probeDatabase(config.DATABASE_URL)
  const db = createDatabase(config.DATABASE_URL, { applicationName: 'nodeplane-cli', poolMax: 2 })
  try {
    await assertSchemaCurrent(db, 'control-plane')
    return await work(db)
  } finally {
    await db.destroy()
  }
}
