import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'
import { KEY_SHOWN_ONCE } from '../../src/cli/display.js'
import { fromCreatedApiKey, type CreatedApiKey, type IssuedKeyView } from '../../src/cli/views.js'

export default class ApiKeyRotate extends BaseCommand<typeof ApiKeyRotate> {
  static override summary = 'Replace an API key with a new one (same name, scopes, expiry); the old one stops working at once'
  static override description =
    'Prints the new plaintext key once. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required).'
  static override examples = [
    '<%= config.bin %> api-key rotate 0193a1b2-…',
    'NEW=$(<%= config.bin %> api-key rotate "$OLD_ID" --yes --json | jq -r .key)',
  ]
  static override args = { id: subjectArg('API key') }
  static override flags = {
    id: subjectFlag('API key'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<IssuedKeyView & { rotated_from_id: string }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'api-key', this.subject('API key'))
    await confirmKeyAction(api, id, 'rotate', 'Whoever uses it must switch to the new key', this.flags.yes)
    const created = await api.post<CreatedApiKey>(`/api-keys/${encodeURIComponent(id)}/rotate`)
    const view = { ...fromCreatedApiKey(created), rotated_from_id: id }
    if (!this.jsonEnabled()) {
      this.log(view.key)
      this.logToStderr(`Rotated ${id}; the new key is ${view.id}. ${KEY_SHOWN_ONCE}`)
    }
    return view
  }
}
