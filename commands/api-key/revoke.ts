import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'
import { apiKeyStatus, type ApiKeyItem } from '../../src/cli/views.js'

export default class ApiKeyRevoke extends BaseCommand<typeof ApiKeyRevoke> {
  static override summary = 'Revoke an API key: it stops working at once and stays listed as revoked'
  static override description = 'Asks for confirmation on a terminal unless --yes; without a terminal it does not ask.'
  static override examples = ['<%= config.bin %> api-key revoke --id 0193a1b2-…', '<%= config.bin %> api-key revoke --id "$KEY_ID" --yes --json']
  static override flags = {
    id: Flags.string({ description: 'id of the key (`nodeplane api-key list`)', required: true }),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<ApiKeyItem> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    await confirmKeyAction(api, this.flags.id, 'Revoke', 'It stops working at once', this.flags.yes)
    const revoked = await api.post<ApiKeyItem>(`/api-keys/${encodeURIComponent(this.flags.id)}/revoke`)
    if (!this.jsonEnabled()) this.log(`Revoked API key ${revoked.id} (${revoked.name}); status: ${apiKeyStatus(revoked)}`)
    return revoked
  }
}
