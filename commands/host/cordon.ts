import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import type { Host } from '../../src/hosts/store.js'
import type { Changed } from '../../src/cli/repeats.js'

export default class HostCordon extends BaseCommand<typeof HostCordon> {
  static override summary = 'Cordon a host: it takes no new nodes; the nodes on it stay'
  static override description = 'ready or unreachable -> cordoned; a cordoned host is a repeat: it says it was already cordoned, nothing changed (exit 0; --json `changed: false`). Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host cordon fra-1']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = { id: subjectFlag('host (name or id)', ['host']), 'api-url': apiUrlFlag }

  async run(): Promise<Changed<Host>> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const host = await hostAction(api, await resolveApiId(api, 'host', this.subject('host (name or id)')), 'cordon')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'cordon'))
    return host
  }
}
