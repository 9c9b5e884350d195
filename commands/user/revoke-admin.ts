import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { describeUser } from '../../src/cli/display.js'
import { changeAdmin } from '../../src/cli/operator.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserRevokeAdmin extends BaseCommand<typeof UserRevokeAdmin> {
  static override summary = "Take a user's admin flag away (directly in the database)"
  static override description =
    "Idempotent. The user's active API keys that carry the admin scope are revoked in the same transaction, so no key keeps powers its user lost. An unknown user exits 3. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required)."
  static override examples = ['<%= config.bin %> user revoke-admin ops@example.com --yes', '<%= config.bin %> user revoke-admin 0193a1b2 --yes --json']
  static override args = { id: subjectArg('user (id or email)') }
  static override flags = {
    id: subjectFlag('user (id or email)', ['user']),
    yes: yesFlag,
  }

  async run(): Promise<UserView & { changed: boolean; revoked_api_keys: string[] }> {
    const id = this.subject('user (id or email)')
    await confirmDestructive(this.flags.yes, () => ({ action: `take the admin flag from user ${id}`, consequence: 'Their active API keys that carry the admin scope are revoked' }))
    const change = await withControlPlaneDatabase(this.env(), async (db) => changeAdmin(db, await resolveDbId(db, 'users', 'user', 'user list', id), false))
    const view = toUserView(change.user)
    if (!this.jsonEnabled()) {
      this.log(change.changed ? `${describeUser(view)} is no longer an admin` : `${describeUser(view)} was not an admin`)
      if (change.revokedAdminKeys.length > 0) this.log(`Revoked its admin API keys: ${change.revokedAdminKeys.join(', ')}`)
    }
    return { ...view, changed: change.changed, revoked_api_keys: change.revokedAdminKeys }
  }
}
