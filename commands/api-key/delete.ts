import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmKeyAction } from '../../src/cli/api-key-confirm.js'

export default class ApiKeyDelete extends BaseCommand<typeof ApiKeyDelete> {
  static override summary = 'Delete an API key: it stops working and leaves the listings'
  static override description = 'Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required).'
  static override examples = ['<%= config.bin %> api-key delete 0193a1b2-…', '<%= config.bin %> api-key delete "$KEY_ID" --yes --json']
  static override args = { id: subjectArg('API key') }
  static override flags = {
    id: subjectFlag('API key'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ id: string; deleted: true }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'api-key', this.subject('API key'))
    await confirmKeyAction(api, id, 'delete', 'It stops working and disappears from the list', this.flags.yes)
    await api.delete(`/api-keys/${encodeURIComponent(id)}`)
    if (!this.jsonEnabled()) this.log(`Deleted API key ${id}`)
    return { id: id, deleted: true }
  }
}
