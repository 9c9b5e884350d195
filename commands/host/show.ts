import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHost, hostNotFound } from '../../src/cli/host-views.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostShow extends BaseCommand<typeof HostShow> {
  static override summary = 'One host: state, address, capacity, pinned host key, last probe'
  static override description = 'An unknown host exits 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host show --host fra-1', '<%= config.bin %> host show --host fra-1 --json | jq -r .host_key_fingerprint']
  static override flags = {
    host: Flags.string({ description: 'host name, or id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Host> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const host = await api.get<Host>(`/hosts/${encodeURIComponent(this.flags.host)}`).catch(hostNotFound(this.flags.host))
    if (!this.jsonEnabled()) this.log(describeHost(host))
    return host
  }
}
