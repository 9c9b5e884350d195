import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import type { AdminUserView } from '../../src/cli/views.js'

export default class UserEnable extends BaseCommand<typeof UserEnable> {
  static override summary = 'Enable a disabled user again through the API (admin key): their API keys work again'
  static override description = 'Sessions revoked by `user disable` stay revoked: the user signs in again. Idempotent. An unknown user exits 3.'
  static override examples = ['<%= config.bin %> user enable mallory@example.com']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AdminUserView> {
    const id = this.subject('user (id or email)')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const user = await api.post<AdminUserView>(`/admin/users/${encodeURIComponent(id)}/enable`)
    if (!this.jsonEnabled()) this.log(user.changed ? `${user.email ?? user.id} is enabled` : `${user.email ?? user.id} was not disabled`)
    return user
  }
}
