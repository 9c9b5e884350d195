import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import type { AdminRevokedKeyView } from '../../src/cli/views.js'

export default class UserRevokeKey extends BaseCommand<typeof UserRevokeKey> {
  static override summary = "Revoke any user's API key through the API (admin key): it stops working at once"
  static override description = 'Revoking a revoked key again is harmless. An unknown key exits 3.'
  static override examples = ['<%= config.bin %> user revoke-key 0193a1b2-… --yes', '<%= config.bin %> user revoke-key "$KEY_ID" --yes --json']
  static override args = { id: subjectArg('API key') }
  static override flags = {
    id: subjectFlag('API key'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AdminRevokedKeyView> {
    const id = this.subject('API key')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    await confirmDestructive(this.flags.yes, () => ({ action: `revoke API key ${id}`, consequence: 'It stops working at once, whoever owns it' }))
    const key = await api.post<AdminRevokedKeyView>(`/admin/api-keys/${encodeURIComponent(id)}/revoke`)
    if (!this.jsonEnabled()) this.log(`Revoked API key ${key.id} (${key.name}) of user ${key.user_id}`)
    return key
  }
}
