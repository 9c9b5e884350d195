import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { describeUser } from '../../src/cli/display.js'
import { changeAdmin } from '../../src/cli/operator.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserGrantAdmin extends BaseCommand<typeof UserGrantAdmin> {
  static override summary = 'Make a user an admin (directly in the database)'
  static override description = 'Idempotent. Name the user by id or email; an unknown user exits 3.'
  static override examples = ['<%= config.bin %> user grant-admin --user ops@example.com', '<%= config.bin %> user grant-admin --user 0193a1b2-… --json']
  static override flags = {
    user: Flags.string({ description: 'user id or email', required: true }),
  }

  async run(): Promise<UserView & { changed: boolean }> {
    const change = await withControlPlaneDatabase(this.env(), (db) => changeAdmin(db, this.flags.user, true))
    const view = toUserView(change.user)
    if (!this.jsonEnabled()) this.log(change.changed ? `${describeUser(view)} is now an admin` : `${describeUser(view)} was already an admin`)
    return { ...view, changed: change.changed }
  }
}
