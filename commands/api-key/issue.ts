import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { KEY_SHOWN_ONCE } from '../../src/cli/display.js'
import { keyFlags, parseExpiresIn, parseScopes } from '../../src/cli/key-flags.js'
import { issueApiKey } from '../../src/cli/operator.js'
import { toIssuedKeyView, type IssuedKeyView } from '../../src/cli/views.js'

export default class ApiKeyIssue extends BaseCommand<typeof ApiKeyIssue> {
  static override summary = 'Issue an API key for any user, directly in the database (bootstrap, break-glass)'
  static override description =
    'Prints the plaintext key once: on its own line on stdout (a warning goes to stderr), or as `key` with --json. --admin adds the admin scope and needs an admin user (else exit 4); the API itself never grants admin.'
  static override examples = [
    '<%= config.bin %> api-key issue --user ops@example.com --name ci --scopes nodes:read,chains:read --expires-in 30d',
    '<%= config.bin %> api-key issue --user ops@example.com --name break-glass --scopes "*" --admin --expires-in 12h --json',
  ]
  static override flags = {
    user: Flags.string({ description: 'user id or email', required: true }),
    ...keyFlags,
    admin: Flags.boolean({ description: 'add the admin scope (the user must be an admin)' }),
  }

  async run(): Promise<IssuedKeyView> {
    const scopes = parseScopes(this.flags.scopes)
    const expiresAt = parseExpiresIn(this.flags['expires-in'])
    const { issued } = await withControlPlaneDatabase(this.env(), (db) =>
      issueApiKey(db, { userRef: this.flags.user, name: this.flags.name, scopes, admin: this.flags.admin, expiresAt }),
    )
    const view = toIssuedKeyView(issued.apiKey, issued.key)
    if (!this.jsonEnabled()) {
      this.log(view.key)
      this.logToStderr(KEY_SHOWN_ONCE)
    }
    return view
  }
}
