import * as Flags from '@oclif/core/flags'
import { createUser } from '../../src/auth/users.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { describeUser } from '../../src/cli/display.js'
import { toUserView, type UserView } from '../../src/cli/views.js'

export default class UserCreate extends BaseCommand<typeof UserCreate> {
  static override summary = 'Create a user directly in the database (bootstrap, break-glass)'
  static override description =
    'Acts on DATABASE_URL (default: the SQLite file in the data dir), not through the API. An existing email is a conflict (exit 4).'
  static override examples = [
    '<%= config.bin %> user create --email ops@example.com --admin',
    'DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> user create --email dev@example.com --json',
  ]
  static override flags = {
    email: Flags.string({ description: 'email address of the user', required: true }),
    admin: Flags.boolean({ description: 'make the user an admin (may then hold admin API keys)' }),
  }

  async run(): Promise<UserView> {
    const user = await withControlPlaneDatabase(this.env(), (db) => createUser(db, { email: this.flags.email, is_admin: this.flags.admin }))
    const view = toUserView(user)
    if (!this.jsonEnabled()) this.log(`Created user ${describeUser(view)}`)
    return view
  }
}
