import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import type { AdminRevokedKeyView } from '../../src/cli/views.js'

export default class UserRevokeKey extends BaseCommand<typeof UserRevokeKey> {
  static override summary = "Revoke any user's API key through the API (admin key): it stops working at once"
  static override description = 'Revoking a revoked key again is harmless. An unknown key exits 3.'
  static override examples = ['<%= config.bin %> user revoke-key --id 0193a1b2-…', '<%= config.bin %> user revoke-key --id "$KEY_ID" --json']
  static override flags = {
    id: Flags.string({ description: 'id of the key (its owner sees it in `nodeplane api-key list`)', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AdminRevokedKeyView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const key = await api.post<AdminRevokedKeyView>(`/admin/api-keys/${encodeURIComponent(this.flags.id)}/revoke`)
    if (!this.jsonEnabled()) this.log(`Revoked API key ${key.id} (${key.name}) of user ${key.user_id}`)
    return key
  }
}
