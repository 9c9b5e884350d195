import { listUsers } from '../../src/auth/users.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { columnsFlag, renderUsers } from '../../src/cli/display.js'
import { listAll } from '../../src/cli/pages.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserList extends BaseCommand<typeof UserList> {
  static override summary = 'List users (operator: an admin key), oldest first'
  static override description = 'Through the admin API (GET /api/v1/admin/users); --direct-db reads the control-plane database instead (break-glass).'
  static override examples = ['<%= config.bin %> user list', "<%= config.bin %> user list --json | jq -r '.users[] | select(.is_admin) | .email'"]
  static override aliases = ['user:ls']
  static override flags = { columns: columnsFlag, 'api-url': apiUrlFlag, 'direct-db': directDbFlag }

  async run(): Promise<{ users: UserView[] }> {
    const users = this.flags['direct-db']
      ? (await withControlPlaneDatabase(this.env(), (db) => listUsers(db))).map(toUserView)
      : await listAll<UserView>(apiClientFor(this.env(), this.flags['api-url']), '/admin/users')
    if (!this.jsonEnabled()) this.log(renderUsers(users))
    return { users }
  }
}
