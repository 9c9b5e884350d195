import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { EXIT } from '../../src/cli/exit-codes.js'
import { loadConfig } from '../../src/config/env.js'
import { secretsCommandEnv, secretsStatus, type SecretsStatus } from '../../src/secrets/setup.js'

export default class SecretsStatusCommand extends BaseCommand<typeof SecretsStatusCommand> {
  static override summary = 'Show the master key file and the server key pairs'
  static override description = 'Checks the master key file (present, mode 0600, 32 bytes) and the server key pairs in the database. Never prints key material.'
  static override examples = ['<%= config.bin %> secrets status', '<%= config.bin %> secrets status --check --json   # exit 1 when secrets are not ready']
  static override flags = {
    check: Flags.boolean({ description: 'exit with status 1 when secrets are not ready (for deploy scripts)' }),
  }

  async run(): Promise<SecretsStatus> {
    const config = loadConfig(secretsCommandEnv, this.env())
    const status = await withControlPlaneDatabase(this.env(), (db) => secretsStatus(db, config))
    if (!this.jsonEnabled()) {
      this.log(`master key file: ${status.master_key_file} (${status.master_key_ok ? 'ok' : status.master_key_file_present ? 'unusable' : 'missing'})`)
      this.log(`master key id:   ${status.master_key_id ?? '-'}`)
      this.log(`server key:      ${status.active_server_key_id ?? 'none'} (${status.server_keys.total} in all, ${status.server_keys.retired} retired)`)
      if (status.problem) this.log(`problem:         ${status.problem}`)
    }
    if (this.flags.check && !status.ready) process.exitCode = EXIT.failure
    return status
  }
}
