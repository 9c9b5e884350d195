import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import type { AdminUserView } from '../../src/cli/views.js'

export default class UserDisable extends BaseCommand<typeof UserDisable> {
  static override summary = "Disable a user through the API (admin key): every key and token of theirs is refused from the next request"
  static override description =
    'Their refresh tokens are revoked too (enable does not bring those sessions back); their API keys are kept and work again after `user enable`. Idempotent. An unknown user exits 3; disabling yourself exits 4.'
  static override examples = ['<%= config.bin %> user disable --user mallory@example.com', '<%= config.bin %> user disable --user 0193a1b2-… --json']
  static override flags = {
    user: Flags.string({ description: 'user id or email', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<AdminUserView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const user = await api.post<AdminUserView>(`/admin/users/${encodeURIComponent(this.flags.user)}/disable`)
    if (!this.jsonEnabled()) {
      const who = user.email ?? user.id
      this.log(user.changed ? `${who} is disabled; ${user.revoked_refresh_tokens} refresh token(s) revoked` : `${who} was already disabled`)
    }
    return user
  }
}
