import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import type { Host } from '../../src/hosts/store.js'
import type { Changed } from '../../src/cli/repeats.js'

export default class HostUncordon extends BaseCommand<typeof HostUncordon> {
  static override summary = 'Uncordon a host: it takes new nodes again'
  static override description = 'cordoned or draining -> ready; a ready host is a repeat: it says it was already ready, nothing changed (exit 0; --json `changed: false`). Other states exit 4, an unknown host 3. Needs an admin key.'
  static override examples = ['<%= config.bin %> host uncordon fra-1']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = { id: subjectFlag('host (name or id)', ['host']), 'api-url': apiUrlFlag }

  async run(): Promise<Changed<Host>> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const host = await hostAction(api, await resolveApiId(api, 'host', this.subject('host (name or id)')), 'uncordon')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'uncordon'))
    return host
  }
}
