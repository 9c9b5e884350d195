import * as Args from '@oclif/core/args'
import { BaseCommand } from '../../src/cli/base-command.js'
import { credentialsPath, removeCredentials, UnknownContextError } from '../../src/cli/credentials.js'

export default class ContextRemove extends BaseCommand<typeof ContextRemove> {
  static override summary = 'Forget a stored login (context); its key keeps working until revoked'
  static override description = 'Removing the current context leaves none current: pick another with `nodeplane context use`. An unknown name exits 3.'
  static override examples = ['<%= config.bin %> context remove staging', '<%= config.bin %> context remove staging --json']
  static override args = { name: Args.string({ description: 'the context to forget', required: true }) }

  async run(): Promise<{ context: string; removed: true; credentials_file: string }> {
    const env = this.env()
    const { removed } = removeCredentials(env, this.args.name)
    if (!removed) throw new UnknownContextError(`no context "${this.args.name}" in ${credentialsPath(env)}`, 'see `nodeplane context list`')
    if (!this.jsonEnabled()) this.log(`Removed context ${this.args.name} (to disable its key everywhere, revoke it: \`nodeplane api-key revoke\`)`)
    return { context: this.args.name, removed: true, credentials_file: credentialsPath(env) }
  }
}
