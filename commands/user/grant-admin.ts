import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { describeUser } from '../../src/cli/display.js'
import { changeAdmin } from '../../src/cli/operator.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserGrantAdmin extends BaseCommand<typeof UserGrantAdmin> {
  static override summary = 'Make a user an admin (directly in the database)'
  static override description = 'Idempotent. Name the user by id or email; an unknown user exits 3.'
  static override examples = ['<%= config.bin %> user grant-admin ops@example.com', '<%= config.bin %> user grant-admin 0193a1b2-… --json']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
  }

  async run(): Promise<UserView & { changed: boolean }> {
    const id = this.subject('user (id or email)')
    const change = await withControlPlaneDatabase(this.env(), async (db) => changeAdmin(db, await resolveDbId(db, 'users', 'user', 'user list', id), true))
    const view = toUserView(change.user)
    if (!this.jsonEnabled()) this.log(change.changed ? `${describeUser(view)} is now an admin` : `${describeUser(view)} was already an admin`)
    return { ...view, changed: change.changed }
  }
}
