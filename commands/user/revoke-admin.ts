import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeAdminFlagChange, setAdminFlag, type AdminFlagResult } from '../../src/cli/admin-flag.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { confirmDestructive } from '../../src/cli/prompt.js'

export default class UserRevokeAdmin extends BaseCommand<typeof UserRevokeAdmin> {
  static override summary = "Take a user's admin flag away (operator: an admin key)"
  static override description =
    "Through the admin API (POST /api/v1/admin/users/{user}/revoke-admin); --direct-db acts on the control-plane database instead (break-glass: the only way to demote yourself, which the API refuses with exit 4). Idempotent. The user's active API keys that carry the admin scope are revoked in the same transaction, so no key keeps powers its user lost. An unknown user exits 3. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required)."
  static override examples = ['<%= config.bin %> user revoke-admin ops@example.com --yes', '<%= config.bin %> user revoke-admin 0193a1b2 --yes --json']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
    yes: yesFlag,
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<AdminFlagResult> {
    const id = this.subject('user (id or email)')
    await confirmDestructive(this.flags.yes, () => ({ action: `take the admin flag from user ${id}`, consequence: 'Their active API keys that carry the admin scope are revoked' }))
    const result = await setAdminFlag({ env: this.env(), apiUrl: this.flags['api-url'], directDb: this.flags['direct-db'] }, id, false)
    if (!this.jsonEnabled()) for (const line of describeAdminFlagChange(result, false)) this.log(line)
    return result
  }
}
