import * as Flags from '@oclif/core/flags'
import { createUser } from '../../src/auth/users.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { describeUser } from '../../src/cli/display.js'
import { toUserView, type UserView } from '../../src/cli/views.js'
import { ConfigError } from '../../src/errors.js'

export default class UserCreate extends BaseCommand<typeof UserCreate> {
  static override summary = 'Create a user (operator: an admin key; the first admin with --direct-db)'
  static override description =
    'Through the admin API (POST /api/v1/admin/users). To bootstrap the first admin, or when nobody can authenticate, --direct-db acts on the control-plane database instead (DATABASE_URL, default the SQLite file in the data dir). An existing email is a conflict (exit 4).'
  static override examples = [
    '<%= config.bin %> user create --email dev@example.com --json',
    'DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> user create --email ops@example.com --admin --direct-db',
  ]
  static override flags = {
    email: Flags.string({ description: 'email address of the user', required: true }),
    admin: Flags.boolean({ description: 'make the user an admin (may then hold admin API keys)' }),
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<UserView> {
    const { email, admin } = this.flags
    const view = this.flags['direct-db']
      ? toUserView(await withControlPlaneDatabase(this.env(), (db) => createUser(db, { email, is_admin: admin })))
      : await this.api().post<UserView>('/admin/users', { email, is_admin: admin })
    if (!this.jsonEnabled()) this.log(`Created user ${describeUser(view)}`)
    return view
  }

  private api() {
    try {
      return apiClientFor(this.env(), this.flags['api-url'])
    } catch (err) {
      // The first run on a new installation: there is no admin to log in as yet.
      if (err instanceof ConfigError) throw new ConfigError([...err.problems, 'to create the first admin on the database itself, add --direct-db (docs/cli.md, "Users and API keys")'])
      throw err
    }
  }
}
