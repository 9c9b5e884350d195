import { BaseCommand } from '../../src/cli/base-command.js'
import { databaseFlag, selectedDatabases } from '../../src/cli/database-flag.js'
import { databaseCommandEnv } from '../../src/config/env.js'
import { createLogger } from '../../src/log.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { migrateDatabases, type MigrateReport } from '../../src/db/operations.js'

export default class DbMigrate extends BaseCommand<typeof DbMigrate> {
  static override summary = 'Apply pending migrations (idempotent; safe to run from two processes at once)'
  static override description =
    'Run before starting daemons. Uses DATABASE_URL for the control plane and PAYMENTS_DATABASE_URL for the payment service; both default to SQLite files in the data directory.'
  static override examples = [
    '<%= config.bin %> db migrate',
    'DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> db migrate --database control-plane --json',
  ]
  static override flags = { database: databaseFlag }

  async run(): Promise<{ databases: MigrateReport[] }> {
    // The database URLs may be files or Vault references (docs/secrets.md); Vault's messages go to stderr, never into --json.
    const { config } = await loadSettingsWithSecrets(databaseCommandEnv, this.env(), () => createLogger({ level: 'warn', destination: process.stderr }))
    const databases = await migrateDatabases(config, selectedDatabases(this.flags.database))
    if (!this.jsonEnabled()) {
      for (const report of databases) {
        const what = report.applied.length === 0 ? 'already up to date' : `applied ${report.applied.join(', ')}`
        this.log(`${report.database}: ${what} (${report.url})`)
      }
    }
    return { databases }
  }
}
