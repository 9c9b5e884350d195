import * as Args from '@oclif/core/args'
import { BaseCommand } from '../../src/cli/base-command.js'
import { useContext } from '../../src/cli/credentials.js'

export default class ContextUse extends BaseCommand<typeof ContextUse> {
  static override summary = 'Make a stored login (context) the current one: commands without --context use it'
  static override description = '$NODEPLANE_CONTEXT and --context still win over it. An unknown name exits 3 and changes nothing.'
  static override examples = ['<%= config.bin %> context use prod', '<%= config.bin %> context use staging --json']
  static override args = { name: Args.string({ description: 'the context to make current', required: true }) }

  async run(): Promise<{ current_context: string; api_url: string; credentials_file: string }> {
    const { file, login } = useContext(this.args.name, this.env())
    if (!this.jsonEnabled()) this.log(`Current context: ${login.context} (${login.api_url})`)
    return { current_context: login.context, api_url: login.api_url, credentials_file: file }
  }
}
