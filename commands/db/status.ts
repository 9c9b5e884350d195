import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { databaseFlag, selectedDatabases } from '../../src/cli/database-flag.js'
import { EXIT } from '../../src/cli/exit-codes.js'
import { databaseCommandEnv, loadConfig } from '../../src/config/env.js'
import { databaseStatus, type StatusReport } from '../../src/db/operations.js'

export default class DbStatus extends BaseCommand<typeof DbStatus> {
  static override summary = 'Show applied and pending migrations of each database'
  static override examples = ['<%= config.bin %> db status', '<%= config.bin %> db status --check --json   # exit 1 when migrations are pending']
  static override flags = {
    database: databaseFlag,
    check: Flags.boolean({ description: 'exit with status 1 when any migration is pending (for deploy scripts)' }),
  }

  async run(): Promise<{ databases: StatusReport[]; up_to_date: boolean }> {
    const config = loadConfig(databaseCommandEnv, this.env())
    const databases = await databaseStatus(config, selectedDatabases(this.flags.database))
    const upToDate = databases.every((d) => d.pending.length === 0)
    if (!this.jsonEnabled()) {
      for (const report of databases) {
        this.log(`${report.database} (${report.dialect}, ${report.url})`)
        this.log(`  applied: ${report.applied.length === 0 ? 'none' : report.applied.join(', ')}`)
        this.log(`  pending: ${report.pending.length === 0 ? 'none' : report.pending.join(', ')}`)
      }
    }
    if (this.flags.check && !upToDate) process.exitCode = EXIT.failure
    return { databases, up_to_date: upToDate }
  }
}
