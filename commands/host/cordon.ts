import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostCordon extends BaseCommand<typeof HostCordon> {
  static override summary = 'Cordon a host: it takes no new nodes; the nodes on it stay'
  static override description = 'ready or unreachable -> cordoned; a cordoned host stays cordoned (exit 0). Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host cordon --host fra-1']
  static override flags = { host: Flags.string({ description: 'host name, or id', required: true }), 'api-url': apiUrlFlag }

  async run(): Promise<Host> {
    const host = await hostAction(apiClientFor(this.env(), this.flags['api-url']), this.flags.host, 'cordon')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'cordon'))
    return host
  }
}
