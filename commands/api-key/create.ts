import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { KEY_SHOWN_ONCE } from '../../src/cli/display.js'
import { keyFlags, parseExpiresIn, parseScopes } from '../../src/cli/key-flags.js'
import { fromCreatedApiKey, type CreatedApiKey, type IssuedKeyView } from '../../src/cli/views.js'

export default class ApiKeyCreate extends BaseCommand<typeof ApiKeyCreate> {
  static override summary = 'Create an API key for yourself (through the API; needs the api-keys:manage scope)'
  static override description =
    'Prints the plaintext key once: on its own line on stdout (a warning goes to stderr), or as `key` with --json. The admin scope cannot be given this way; an operator uses `nodeplane api-key issue --admin`.'
  static override examples = [
    '<%= config.bin %> api-key create --name ci --scopes nodes:read,chains:read --expires-in 90d',
    'KEY=$(<%= config.bin %> api-key create --name deploy --scopes "*" --json | jq -r .key)',
  ]
  static override flags = { ...keyFlags, 'api-url': apiUrlFlag }

  async run(): Promise<IssuedKeyView> {
    const scopes = parseScopes(this.flags.scopes)
    const expiresAt = parseExpiresIn(this.flags['expires-in'])
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const created = await api.post<CreatedApiKey>('/api-keys', {
      name: this.flags.name,
      scopes,
      ...(expiresAt ? { expires_at: expiresAt.toISOString() } : {}),
    })
    const view = fromCreatedApiKey(created)
    if (!this.jsonEnabled()) {
      this.log(view.key)
      this.logToStderr(KEY_SHOWN_ONCE)
    }
    return view
  }
}
