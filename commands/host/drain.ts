import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostDrain extends BaseCommand<typeof HostDrain> {
  static override summary = 'Drain a host: no new nodes, then cordoned once no node is on it'
  static override description =
    'ready, cordoned or unreachable -> draining, and at once cordoned when no node is on the host. Moving its nodes to other hosts comes with placement (docs/infrastructure.md); until then a host with nodes stays draining. Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host drain fra-1', '<%= config.bin %> host drain fra-1 --json | jq -r .state']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = { id: subjectFlag('host (name or id)', ['host']), 'api-url': apiUrlFlag }

  async run(): Promise<Host> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const host = await hostAction(api, await resolveApiId(api, 'host', this.subject('host (name or id)')), 'drain')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'drain'))
    return host
  }
}
