/**
 * The break-glass path of the operator commands that otherwise go through the admin API
 * (docs/cli.md, "Operators: the API, or the database directly"): with `--direct-db` they act on
 * the control-plane database itself (DATABASE_URL, default the SQLite file in the data dir), with
 * no API and no credentials. For the first admin (`user create --admin --direct-db`) and for when
 * nobody can authenticate.
 */
import * as Flags from '@oclif/core/flags'

export const directDbFlag = Flags.boolean({
  description: 'bootstrap and break-glass: act on the control-plane database (DATABASE_URL) directly instead of through the API',
  helpGroup: 'BREAK-GLASS',
  default: false,
  exclusive: ['api-url'],
})
