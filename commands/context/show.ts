import { BaseCommand } from '../../src/cli/base-command.js'
import { credentialsPath, readCredentials, requestedContext } from '../../src/cli/credentials.js'
import { NotFoundError } from '../../src/errors.js'

export default class ContextShow extends BaseCommand<typeof ContextShow> {
  static override summary = 'Show the context commands run here would use: its name, API URL and where the choice came from'
  static override description = 'The choice: --context, else $NODEPLANE_CONTEXT, else the current context. No context at all exits 3. Never shows the key.'
  static override examples = ['<%= config.bin %> context show', 'NODEPLANE_CONTEXT=staging <%= config.bin %> context show --json']

  async run(): Promise<{ name: string; api_url: string; selected_by: 'flag' | 'env' | 'current'; credentials_file: string }> {
    const env = this.env()
    const login = readCredentials(env)
    if (!login) throw new NotFoundError('no context in use: no stored login is current', 'log in with `nodeplane login --api-url URL`, or pick one with `nodeplane context use NAME`')
    const selectedBy = this.flags.context ? 'flag' : requestedContext(env) !== undefined ? 'env' : 'current'
    const result = { name: login.context, api_url: login.api_url, selected_by: selectedBy, credentials_file: credentialsPath(env) } as const
    if (!this.jsonEnabled()) this.log(`${login.context}: ${login.api_url}${selectedBy === 'current' ? '' : ` (from ${selectedBy === 'flag' ? '--context' : 'NODEPLANE_CONTEXT'})`}`)
    return result
  }
}
