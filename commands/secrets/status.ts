import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { EXIT } from '../../src/cli/exit-codes.js'
import { createLogger } from '../../src/log.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { openMasterKey } from '../../src/secrets/master-key.js'
import { secretsCommandEnv, secretsStatus, type SecretsStatus } from '../../src/secrets/setup.js'

export default class SecretsStatusCommand extends BaseCommand<typeof SecretsStatusCommand> {
  static override summary = 'Show the master key file and the server key pairs'
  static override description = 'Checks the master key file (present, mode 0600, 32 bytes) and the server key pairs in the database. Never prints key material.'
  static override examples = ['<%= config.bin %> secrets status', '<%= config.bin %> secrets status --check --json   # exit 1 when secrets are not ready']
  static override flags = {
    check: Flags.boolean({ description: 'exit with status 1 when secrets are not ready (for deploy scripts)' }),
  }

  async run(): Promise<SecretsStatus> {
    // With Vault: the same login and transit check as the daemons (its messages on stderr, never in --json).
    const { config, secrets } = await loadSettingsWithSecrets(secretsCommandEnv, this.env(), () => createLogger({ level: 'warn', destination: process.stderr }))
    let status: SecretsStatus
    try {
      const vaultKey = config.SECRETS_PROVIDER === 'vault' ? await openMasterKey(config, secrets).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err)))) : undefined
      status = await withControlPlaneDatabase(this.env(), (db) => secretsStatus(db, config, vaultKey))
    } finally {
      await secrets.close()
    }
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
