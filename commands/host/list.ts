import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { columnsFlag } from '../../src/cli/display.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { renderHosts } from '../../src/cli/host-views.js'
import { listAll } from '../../src/cli/pages.js'
import { HOST_STATES } from '../../src/hosts/host-states.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostList extends BaseCommand<typeof HostList> {
  static override summary = 'List the fleet\'s hosts by name: state, region, address, capacity, last probe'
  static override description = 'Removed hosts are listed only with --state removed. Needs an admin key.'
  static override examples = ['<%= config.bin %> host list', '<%= config.bin %> host list --state unreachable --json | jq -r ".hosts[].name"']
  static override aliases = ['host:ls']
  static override flags = {
    columns: columnsFlag,
    state: Flags.string({ description: 'only hosts in this state', options: [...HOST_STATES] }),
    region: Flags.string({ description: 'only hosts in this region' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ hosts: Host[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const filters = new URLSearchParams()
    if (this.flags.state !== undefined) filters.set('state', this.flags.state)
    if (this.flags.region !== undefined) filters.set('region', this.flags.region)
    const hosts = await listAll<Host>(api, filters.size > 0 ? `/hosts?${filters.toString()}` : '/hosts')
    if (!this.jsonEnabled()) this.log(hosts.length === 0 ? 'No hosts. Add one with `nodeplane host add`.' : renderHosts(hosts))
    return { hosts }
  }
}
