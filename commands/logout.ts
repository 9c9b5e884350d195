import { BaseCommand } from '../src/cli/base-command.js'
import { credentialsPath, removeCredentials } from '../src/cli/credentials.js'

export default class Logout extends BaseCommand<typeof Logout> {
  static override summary = 'Forget the stored login (the key itself keeps working until revoked)'
  static override description = 'Removes $XDG_CONFIG_HOME/nodeplane/credentials.json. To disable the key everywhere, revoke it first: `nodeplane api-key revoke --id ID`.'
  static override examples = ['<%= config.bin %> logout', '<%= config.bin %> logout --json']

  async run(): Promise<{ credentials_file: string; removed: boolean }> {
    const env = this.env()
    const file = credentialsPath(env)
    const removed = removeCredentials(env)
    if (!this.jsonEnabled()) this.log(removed ? `Removed ${file}` : `Not logged in (no ${file})`)
    return { credentials_file: file, removed }
  }
}
