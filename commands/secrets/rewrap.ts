import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { EXIT } from '../../src/cli/exit-codes.js'
import { ConfigError } from '../../src/errors.js'
import { createLogger } from '../../src/log.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { openMasterKey } from '../../src/secrets/master-key.js'
import { rewrapMasterKeyValues, type RewrapCounts, type RewrapResult } from '../../src/secrets/rewrap.js'
import { secretsCommandEnv } from '../../src/secrets/setup.js'
import { VaultTransitMasterKey } from '../../src/secrets/vault/transit-master-key.js'

export default class SecretsRewrap extends BaseCommand<typeof SecretsRewrap> {
  static override summary = "Rewrap every data key and server secret key under the Vault transit key's latest version"
  static override description =
    'Run after rotating the transit key in Vault (SECRETS_PROVIDER=vault) and before raising its min_decryption_version: Vault re-encrypts each wrapped value under the latest key version (the plaintext never leaves Vault) and the database row is updated. Safe to run while the daemons serve and to run again. Exit 1 when a value could not be rewrapped (listed in the output). See docs/secrets.md, "Rotating the master key".'
  static override examples = ['<%= config.bin %> secrets rewrap', '<%= config.bin %> secrets rewrap --json']

  async run(): Promise<RewrapResult> {
    const { config, secrets } = await loadSettingsWithSecrets(secretsCommandEnv, this.env(), () => createLogger({ level: 'warn', destination: process.stderr }))
    let result: RewrapResult
    try {
      if (config.SECRETS_PROVIDER !== 'vault') {
        throw new ConfigError(['SECRETS_PROVIDER: secrets rewrap is for the Vault transit key (SECRETS_PROVIDER=vault); the local master key file has no versions to rewrap to'])
      }
      const masterKey = await openMasterKey(config, secrets)
      if (!(masterKey instanceof VaultTransitMasterKey)) throw new ConfigError(['SECRETS_PROVIDER=vault: the master key is not the transit key'])
      result = await withControlPlaneDatabase(this.env(), (db) => rewrapMasterKeyValues(db, masterKey))
    } finally {
      await secrets.close()
    }
    if (!this.jsonEnabled()) {
      this.log(`master key: ${result.master_key_id}, latest version ${result.latest_version ?? '-'}`)
      this.log(`data keys:   ${describe(result.data_keys)}`)
      this.log(`server keys: ${describe(result.server_keys)}`)
      for (const failure of result.failures) this.log(`not rewrapped: ${failure.kind} ${failure.id}: ${failure.reason}`)
    }
    if (result.failures.length > 0) process.exitCode = EXIT.failure
    return result
  }
}

function describe(counts: RewrapCounts): string {
  const parts = [`${counts.rewrapped} rewrapped`, `${counts.already_latest} already at the latest version`]
  if (counts.failed > 0) parts.push(`${counts.failed} failed`)
  if (counts.other_master_key > 0) parts.push(`${counts.other_master_key} wrapped by another master key (not rewrapped)`)
  return parts.join(', ')
}
