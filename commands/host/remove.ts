import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeHostAction, hostAction } from '../../src/cli/host-actions.js'
import { hostNotFound } from '../../src/cli/host-views.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import type { Host } from '../../src/hosts/store.js'

export default class HostRemove extends BaseCommand<typeof HostRemove> {
  static override summary = 'Remove a host from the fleet and delete its SSH key'
  static override description =
    'Only a host with no nodes on it (exit 4 otherwise: drain it first). Its name is free again; `host show --host ID` still shows it as removed. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs an admin key.'
  static override examples = ['<%= config.bin %> host remove fra-1 --yes']
  static override args = { id: subjectArg('host (name or id)') }
  static override flags = { id: subjectFlag('host (name or id)', ['host']), yes: yesFlag, 'api-url': apiUrlFlag }

  async run(): Promise<Host> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'host', this.subject('host (name or id)'))
    await confirmDestructive(this.flags.yes, async () => {
      const host = await api.get<Host>(`/hosts/${encodeURIComponent(id)}`).catch(hostNotFound(id))
      // A removed host is not asked about: the API answers what it answers.
      if (host.state === 'removed') return undefined
      return { action: `remove host ${host.name} (${host.id}, ${host.state}, ${host.user}@${host.address}) from the fleet`, consequence: 'Its SSH key is deleted; a host with nodes is refused' }
    })
    const host = await hostAction(api, id, 'remove')
    if (!this.jsonEnabled()) this.log(describeHostAction(host, 'remove'))
    return host
  }
}
