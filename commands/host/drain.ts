import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeDrain, hostAction } from '../../src/cli/host-actions.js'
import type { HostDetail } from '../../src/hosts/service.js'

export default class HostDrain extends BaseCommand<typeof HostDrain> {
  static override summary = 'Drain a host: its nodes moved to other hosts one at a time, then cordoned'
  static override description =
    'ready, cordoned or unreachable -> draining: the host takes no new node, and its nodes are moved to other hosts of its region one at a time (each a migration that does not wait for the failure cooldown; room is reserved first), then it is cordoned. A host with no node is cordoned at once. The command returns when the drain has started; follow it with `host show`. When no host has room for a node the drain stops with the reason and the host stays draining: add or uncordon a host, then drain again to continue. `host uncordon` stops a drain. Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host drain fra-1', '<%= config.bin %> host drain fra-1 --json | jq -r .state', '<%= config.bin %> host show fra-1 --json | jq .drain']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = { id: subjectFlag('host (name or id)', ['host']), 'api-url': apiUrlFlag }

  async run(): Promise<HostDetail> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const host = await hostAction<HostDetail>(api, await resolveApiId(api, 'host', this.subject('host (name or id)')), 'drain')
    if (!this.jsonEnabled()) this.log(describeDrain(host))
    return host
  }
}
