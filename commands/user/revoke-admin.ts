import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { describeUser } from '../../src/cli/display.js'
import { changeAdmin } from '../../src/cli/operator.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserRevokeAdmin extends BaseCommand<typeof UserRevokeAdmin> {
  static override summary = "Take a user's admin flag away (directly in the database)"
  static override description =
    "Idempotent. The user's active API keys that carry the admin scope are revoked in the same transaction, so no key keeps powers its user lost. An unknown user exits 3."
  static override examples = ['<%= config.bin %> user revoke-admin --user ops@example.com', '<%= config.bin %> user revoke-admin --user 0193a1b2-… --json']
  static override flags = {
    user: Flags.string({ description: 'user id or email', required: true }),
  }

  async run(): Promise<UserView & { changed: boolean; revoked_api_keys: string[] }> {
    const change = await withControlPlaneDatabase(this.env(), (db) => changeAdmin(db, this.flags.user, false))
    const view = toUserView(change.user)
    if (!this.jsonEnabled()) {
      this.log(change.changed ? `${describeUser(view)} is no longer an admin` : `${describeUser(view)} was not an admin`)
      if (change.revokedAdminKeys.length > 0) this.log(`Revoked its admin API keys: ${change.revokedAdminKeys.join(', ')}`)
    }
    return { ...view, changed: change.changed, revoked_api_keys: change.revokedAdminKeys }
  }
}
