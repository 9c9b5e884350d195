import { BaseCommand } from '../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../src/cli/api-flags.js'
import type { KeySource } from '../src/cli/api-target.js'
import { renderMe } from '../src/cli/display.js'
import type { Me } from '../src/cli/views.js'

export default class Whoami extends BaseCommand<typeof Whoami> {
  static override summary = 'Show who the API takes you for: user, admin flag, scopes, how you authenticated'
  static override description =
    'Credentials: $NODEPLANE_API_KEY, else the stored login (`nodeplane login`), else the admin key of the `nodeplane up` running for the data dir.'
  static override examples = ['<%= config.bin %> whoami', 'NODEPLANE_API_KEY=$(cat .nodeplane/admin-api-key) <%= config.bin %> whoami --json']
  static override flags = { 'api-url': apiUrlFlag }

  async run(): Promise<Me & { api_url: string; credentials_from: KeySource | null; context: string | null }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const me = await api.get<Me>('/me')
    const result = { ...me, api_url: api.url, credentials_from: api.target.credential?.source ?? null, context: api.target.credential?.context ?? null }
    if (!this.jsonEnabled()) this.log(renderMe(me, api.url))
    return result
  }
}
