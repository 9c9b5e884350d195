import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeIncident, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'

export default class IncidentShow extends BaseCommand<typeof IncidentShow> {
  static override summary = 'Show one incident: category, severity, status, occurrences, who acknowledged or resolved it'
  static override description = 'An unknown id, or an incident that is not yours, exits 3. Needs the scope nodes:read.'
  static override examples = ['<%= config.bin %> incident show 0193a1b2-…', '<%= config.bin %> incident show "$INCIDENT" --json | jq -r .status']
  static override args = { id: subjectArg('incident') }
  static override flags = {
    id: subjectFlag('incident'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Incident> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'incident', this.subject('incident'))
    const incident = await api.get<Incident>(`/incidents/${encodeURIComponent(id)}`).catch(incidentNotFound(id))
    if (!this.jsonEnabled()) this.log(describeIncident(incident))
    return incident
  }
}
