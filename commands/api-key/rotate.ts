import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'
import { KEY_SHOWN_ONCE } from '../../src/cli/display.js'
import { fromCreatedApiKey, type CreatedApiKey, type IssuedKeyView } from '../../src/cli/views.js'

export default class ApiKeyRotate extends BaseCommand<typeof ApiKeyRotate> {
  static override summary = 'Replace an API key with a new one (same name, scopes, expiry); the old one stops working at once'
  static override description =
    'Prints the new plaintext key once. Asks for confirmation on a terminal unless --yes; without a terminal it does not ask.'
  static override examples = [
    '<%= config.bin %> api-key rotate --id 0193a1b2-…',
    'NEW=$(<%= config.bin %> api-key rotate --id "$OLD_ID" --yes --json | jq -r .key)',
  ]
  static override flags = {
    id: Flags.string({ description: 'id of the key (`nodeplane api-key list`)', required: true }),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<IssuedKeyView & { rotated_from_id: string }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    await confirmKeyAction(api, this.flags.id, 'Rotate', 'Whoever uses it must switch to the new key', this.flags.yes)
    const created = await api.post<CreatedApiKey>(`/api-keys/${encodeURIComponent(this.flags.id)}/rotate`)
    const view = { ...fromCreatedApiKey(created), rotated_from_id: this.flags.id }
    if (!this.jsonEnabled()) {
      this.log(view.key)
      this.logToStderr(`Rotated ${this.flags.id}; the new key is ${view.id}. ${KEY_SHOWN_ONCE}`)
    }
    return view
  }
}
