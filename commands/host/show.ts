import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHost, hostNotFound } from '../../src/cli/host-views.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostShow extends BaseCommand<typeof HostShow> {
  static override summary = 'One host: state, address, capacity, pinned host key, last probe'
  static override description = 'An unknown host exits 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host show fra-1', '<%= config.bin %> host show fra-1 --json | jq -r .host_key_fingerprint']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = {
    id: subjectFlag('host (name or id)', ['host']),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Host> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'host', this.subject('host (name or id)'))
    const host = await api.get<Host>(`/hosts/${encodeURIComponent(id)}`).catch(hostNotFound(id))
    if (!this.jsonEnabled()) this.log(describeHost(host))
    return host
  }
}
