import { BaseCommand } from '../../src/cli/base-command.js'
import { yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { createLogger } from '../../src/log.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { openMasterKey, type MasterKey } from '../../src/secrets/master-key.js'
import { rotateServerKeyPair, type ServerPublicKey } from '../../src/secrets/server-key.js'
import { secretsCommandEnv } from '../../src/secrets/setup.js'

export default class SecretsRotateServerKey extends BaseCommand<typeof SecretsRotateServerKey> {
  static override summary = 'Make a new server X25519 key pair the active one'
  static override description =
    'Clients seal secret inputs to the new key from now on; the previous pairs are kept (retired), so inputs sealed to them still open. Also creates the first pair when there is none. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required).'
  static override examples = ['<%= config.bin %> secrets rotate-server-key', '<%= config.bin %> secrets rotate-server-key --yes --json']
  static override flags = { yes: yesFlag }

  async run(): Promise<ServerPublicKey & { retired: string[] }> {
    // With Vault, the new pair is wrapped by the transit key (Vault's messages on stderr, never in --json).
    const { config, secrets } = await loadSettingsWithSecrets(secretsCommandEnv, this.env(), () => createLogger({ level: 'warn', destination: process.stderr }))
    try {
      return await this.rotate(await openMasterKey(config, secrets))
    } finally {
      await secrets.close()
    }
  }

  private async rotate(masterKey: MasterKey): Promise<ServerPublicKey & { retired: string[] }> {
    await confirmDestructive(this.flags.yes, () => ({ action: 'make a new server X25519 key pair the active one', consequence: 'Clients seal secret inputs to the new key from now on; the old pairs still open earlier inputs' }))
    const { publicKey, retired } = await withControlPlaneDatabase(this.env(), (db) => rotateServerKeyPair(db, masterKey))
    if (!this.jsonEnabled()) {
      this.log(`Server key ${publicKey.key_id} is now active: ${publicKey.public_key}`)
      if (retired.length > 0) this.log(`Retired (still opens earlier inputs): ${retired.join(', ')}`)
    }
    return { ...publicKey, retired }
  }
}
