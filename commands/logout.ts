import { BaseCommand } from '../src/cli/base-command.js'
import { credentialsPath, removeCredentials } from '../src/cli/credentials.js'

export default class Logout extends BaseCommand<typeof Logout> {
  static override summary = 'Forget the stored login of the context in use (the key itself keeps working until revoked)'
  static override description = 'Removes the context (--context, $NODEPLANE_CONTEXT, else the current one) from $XDG_CONFIG_HOME/nodeplane/credentials.json, and the file with its last context. To disable the key everywhere, revoke it first: `nodeplane api-key revoke ID`.'
  static override examples = ['<%= config.bin %> logout', '<%= config.bin %> logout --context staging --json']

  async run(): Promise<{ credentials_file: string; removed: boolean; context: string | null }> {
    const env = this.env()
    const file = credentialsPath(env)
    const { removed, context } = removeCredentials(env)
    if (!this.jsonEnabled()) this.log(removed ? `Removed context ${context} from ${file}` : `Not logged in${context ? ` to context ${context}` : ''} (nothing in ${file})`)
    return { credentials_file: file, removed, context }
  }
}
