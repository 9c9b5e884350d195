import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import type { AdminUserView } from '../../src/cli/views.js'

export default class UserDisable extends BaseCommand<typeof UserDisable> {
  static override summary = "Disable a user through the API (admin key): every key and token of theirs is refused from the next request"
  static override description =
    'Their refresh tokens are revoked too (enable does not bring those sessions back); their API keys are kept and work again after `user enable`. Idempotent. An unknown user exits 3; disabling yourself exits 4.'
  static override examples = ['<%= config.bin %> user disable mallory@example.com --yes', '<%= config.bin %> user disable 0193a1b2-… --yes --json']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AdminUserView> {
    const id = this.subject('user (id or email)')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    await confirmDestructive(this.flags.yes, () => ({ action: `disable user ${id}`, consequence: 'Every key and token of theirs is refused from the next request, their sessions end' }))
    const user = await api.post<AdminUserView>(`/admin/users/${encodeURIComponent(id)}/disable`)
    if (!this.jsonEnabled()) {
      const who = user.email ?? user.id
      this.log(user.changed ? `${who} is disabled; ${user.revoked_refresh_tokens} refresh token(s) revoked` : `${who} was already disabled`)
    }
    return user
  }
}
