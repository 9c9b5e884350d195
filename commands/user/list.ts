import { listUsers } from '../../src/auth/users.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { columnsFlag, renderUsers } from '../../src/cli/display.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserList extends BaseCommand<typeof UserList> {
  static override summary = 'List users (directly from the database), oldest first'
  static override examples = ['<%= config.bin %> user list', "<%= config.bin %> user list --json | jq -r '.users[] | select(.is_admin) | .email'"]
  static override aliases = ['user:ls']
  static override flags = { columns: columnsFlag }

  async run(): Promise<{ users: UserView[] }> {
    const users = (await withControlPlaneDatabase(this.env(), (db) => listUsers(db))).map(toUserView)
    if (!this.jsonEnabled()) this.log(renderUsers(users))
    return { users }
  }
}
