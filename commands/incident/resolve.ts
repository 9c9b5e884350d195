import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { describeMove, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'

export default class IncidentResolve extends BaseCommand<typeof IncidentResolve> {
  static override summary = 'Resolve an open or acknowledged incident by hand'
  static override description =
    'A resolved or auto_resolved incident exits 4; an unknown id, or an incident that is not yours, exits 3. A later failure of the same kind opens a new incident. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs the scope nodes:write.'
  static override examples = ['<%= config.bin %> incident resolve "$INCIDENT" --yes', '<%= config.bin %> incident resolve "$INCIDENT" --yes --json | jq -r .resolved_at']
  static override args = { id: subjectArg('incident') }
  static override flags = {
    id: subjectFlag('incident'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Incident> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'incident', this.subject('incident'))
    await confirmDestructive(this.flags.yes, async () => {
      const i = await api.get<Incident>(`/incidents/${encodeURIComponent(id)}`).catch(incidentNotFound(id))
      // An incident already resolved is not asked about: the API refuses it (exit 4).
      if (i.status !== 'open' && i.status !== 'acknowledged') return undefined
      return { action: `resolve incident ${i.id} (${i.severity} ${i.category} on node ${i.node_id}, ${i.status})`, consequence: 'It is closed by hand; a later failure of the same kind opens a new incident' }
    })
    const incident = await api.post<Incident>(`/incidents/${encodeURIComponent(id)}/resolve`, {}).catch(incidentNotFound(id))
    if (!this.jsonEnabled()) this.log(describeMove(incident))
    return incident
  }
}
