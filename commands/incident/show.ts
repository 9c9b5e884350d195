import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeIncident, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'

export default class IncidentShow extends BaseCommand<typeof IncidentShow> {
  static override summary = 'Show one incident: category, severity, status, occurrences, who acknowledged or resolved it'
  static override description = 'An unknown id, or an incident that is not yours, exits 3. Needs the scope nodes:read.'
  static override examples = ['<%= config.bin %> incident show --id 0193a1b2-…', '<%= config.bin %> incident show --id "$INCIDENT" --json | jq -r .status']
  static override flags = {
    id: Flags.string({ description: 'incident id (`nodeplane incident list`)', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Incident> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const incident = await api.get<Incident>(`/incidents/${encodeURIComponent(this.flags.id)}`).catch(incidentNotFound(this.flags.id))
    if (!this.jsonEnabled()) this.log(describeIncident(incident))
    return incident
  }
}
