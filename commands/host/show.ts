import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHost, hostNotFound } from '../../src/cli/host-views.js'
import type { HostDetail } from '../../src/hosts/service.js'

export default class HostShow extends BaseCommand<typeof HostShow> {
  static override summary = 'One host: state, capacity used and free, the nodes placed on it, its drain, pinned host key, last probe'
  static override description =
    'Lists each node placed on the host (short id, instance type, RPC port, state, what it reserves), the capacity used and free, and the latest drain (nodes moved and left, the node being moved, why it stopped). An unknown host exits 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host show fra-1', '<%= config.bin %> host show fra-1 --json | jq -r .host_key_fingerprint', '<%= config.bin %> host show fra-1 --json | jq \'.drain | {status, nodes_left, stop_reason}\'']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = {
    id: subjectFlag('host (name or id)', ['host']),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<HostDetail> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'host', this.subject('host (name or id)'))
    const host = await api.get<HostDetail>(`/hosts/${encodeURIComponent(id)}`).catch(hostNotFound(id))
    if (!this.jsonEnabled()) this.log(describeHost(host))
    return host
  }
}
