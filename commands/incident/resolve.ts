import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { describeMove, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'
import type { Changed } from '../../src/cli/repeats.js'

export default class IncidentResolve extends BaseCommand<typeof IncidentResolve> {
  static override summary = 'Resolve an open or acknowledged incident by hand'
  static override description =
    'A resolved incident is a repeat: exit 0, nothing changed. An auto_resolved one exits 4; an unknown id, or an incident that is not yours, exits 3. A later failure of the same kind opens a new incident. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs the scope nodes:write.'
  static override examples = ['<%= config.bin %> incident resolve "$INCIDENT" --yes', '<%= config.bin %> incident resolve "$INCIDENT" --yes --json | jq -r .resolved_at']
  static override args = { id: subjectArg('incident') }
  static override flags = {
    id: subjectFlag('incident'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Changed<Incident>> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'incident', this.subject('incident'))
    const path = `/incidents/${encodeURIComponent(id)}`
    const i = await api.get<Incident>(path).catch(incidentNotFound(id))
    // Already resolved: a repeat, nothing to ask (docs/cli.md, "Repeats"). Auto-resolved: the API refuses (exit 4).
    const incident: Changed<Incident> =
      i.status === 'resolved'
        ? { ...i, changed: false }
        : await confirmDestructive(this.flags.yes, () =>
            i.status === 'open' || i.status === 'acknowledged'
              ? { action: `resolve incident ${i.id} (${i.severity} ${i.category} on node ${i.node_id}, ${i.status})`, consequence: 'It is closed by hand; a later failure of the same kind opens a new incident' }
              : undefined,
          ).then(() => api.post<Changed<Incident>>(`${path}/resolve`, {}).catch(incidentNotFound(id)))
    if (!this.jsonEnabled()) this.log(describeMove(incident))
    return incident
  }
}
