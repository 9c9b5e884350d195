import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeAdminFlagChange, setAdminFlag, type AdminFlagResult } from '../../src/cli/admin-flag.js'
import { directDbFlag } from '../../src/cli/direct-db.js'

export default class UserGrantAdmin extends BaseCommand<typeof UserGrantAdmin> {
  static override summary = 'Make a user an admin (operator: an admin key)'
  static override description =
    'Through the admin API (POST /api/v1/admin/users/{user}/grant-admin); --direct-db acts on the control-plane database instead (break-glass). Idempotent. Name the user by id or email; an unknown user exits 3.'
  static override examples = ['<%= config.bin %> user grant-admin ops@example.com', '<%= config.bin %> user grant-admin 0193a1b2-… --json']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<AdminFlagResult> {
    const result = await setAdminFlag({ env: this.env(), apiUrl: this.flags['api-url'], directDb: this.flags['direct-db'] }, this.subject('user (id or email)'), true)
    if (!this.jsonEnabled()) for (const line of describeAdminFlagChange(result, true)) this.log(line)
    return result
  }
}
