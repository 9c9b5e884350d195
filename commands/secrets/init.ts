import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { loadConfig } from '../../src/config/env.js'
import { initSecrets, secretsCommandEnv, type SecretsInitResult } from '../../src/secrets/setup.js'

export default class SecretsInit extends BaseCommand<typeof SecretsInit> {
  static override summary = 'Create the master key file and the first server key pair'
  static override description =
    'Writes a new 32-byte master key to SECRETS_MASTER_KEY_FILE (default <data dir>/master.key, mode 0600) and creates the server X25519 key pair in the database (DATABASE_URL). An existing master key file is never overwritten: exit 4. Back the file up: without it, no stored key can be decrypted.'
  static override examples = [
    '<%= config.bin %> secrets init',
    'SECRETS_MASTER_KEY_FILE=/etc/nodeplane/master.key DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> secrets init --json',
  ]

  async run(): Promise<SecretsInitResult> {
    const config = loadConfig(secretsCommandEnv, this.env())
    const result = await withControlPlaneDatabase(this.env(), (db) => initSecrets(db, config))
    if (!this.jsonEnabled()) {
      this.log(`Created master key ${result.master_key_id} in ${result.master_key_file} (mode 0600). Back this file up: without it no stored key can be decrypted.`)
      this.log(`Server public key ${result.server_key.key_id}: ${result.server_key.public_key}`)
    }
    return result
  }
}
