import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostDrain extends BaseCommand<typeof HostDrain> {
  static override summary = 'Drain a host: no new nodes, then cordoned once no node is on it'
  static override description =
    'ready, cordoned or unreachable -> draining, and at once cordoned when no node is on the host. Moving its nodes to other hosts comes with placement (docs/infrastructure.md); until then a host with nodes stays draining. Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host drain --host fra-1', '<%= config.bin %> host drain --host fra-1 --json | jq -r .state']
  static override flags = { host: Flags.string({ description: 'host name, or id', required: true }), 'api-url': apiUrlFlag }

  async run(): Promise<Host> {
    const host = await hostAction(apiClientFor(this.env(), this.flags['api-url']), this.flags.host, 'drain')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'drain'))
    return host
  }
}
