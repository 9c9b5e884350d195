import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'

export default class ApiKeyDelete extends BaseCommand<typeof ApiKeyDelete> {
  static override summary = 'Delete an API key: it stops working and leaves the listings'
  static override description = 'Asks for confirmation on a terminal unless --yes; without a terminal it does not ask.'
  static override examples = ['<%= config.bin %> api-key delete --id 0193a1b2-…', '<%= config.bin %> api-key delete --id "$KEY_ID" --yes --json']
  static override flags = {
    id: Flags.string({ description: 'id of the key (`nodeplane api-key list`)', required: true }),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ id: string; deleted: true }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    await confirmKeyAction(api, this.flags.id, 'Delete', 'It stops working and disappears from the list', this.flags.yes)
    await api.delete(`/api-keys/${encodeURIComponent(this.flags.id)}`)
    if (!this.jsonEnabled()) this.log(`Deleted API key ${this.flags.id}`)
    return { id: this.flags.id, deleted: true }
  }
}
