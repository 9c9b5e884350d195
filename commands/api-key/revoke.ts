import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'
import { apiKeyStatus, type ApiKeyItem } from '../../src/cli/views.js'
import { alreadyNote, type Changed } from '../../src/cli/repeats.js'

export default class ApiKeyRevoke extends BaseCommand<typeof ApiKeyRevoke> {
  static override summary = 'Revoke an API key: it stops working at once and stays listed as revoked'
  static override description = 'Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required).'
  static override examples = ['<%= config.bin %> api-key revoke 0193a1b2-…', '<%= config.bin %> api-key revoke "$KEY_ID" --yes --json']
  static override args = { id: subjectArg('API key') }
  static override flags = {
    id: subjectFlag('API key'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Changed<ApiKeyItem>> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'api-key', this.subject('API key'))
    const key = await api.get<ApiKeyItem>(`/api-keys/${encodeURIComponent(id)}`)
    // Already revoked: a repeat, nothing to ask (docs/cli.md, "Repeats").
    if (key.revoked_at) {
      if (!this.jsonEnabled()) this.log(alreadyNote(`API key ${key.id} (${key.name})`, 'revoked', key.revoked_at))
      return { ...key, changed: false }
    }
    await confirmKeyAction(api, id, 'revoke', 'It stops working at once', this.flags.yes, key)
    const revoked = await api.post<ApiKeyItem>(`/api-keys/${encodeURIComponent(id)}/revoke`)
    if (!this.jsonEnabled()) this.log(`Revoked API key ${revoked.id} (${revoked.name}); status: ${apiKeyStatus(revoked)}`)
    return { ...revoked, changed: true }
  }
}
