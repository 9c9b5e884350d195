import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeMove, incidentNotFound } from '../../src/cli/incident-views.js'
import type { Incident } from '../../src/health/incident-store.js'

export default class IncidentResolve extends BaseCommand<typeof IncidentResolve> {
  static override summary = 'Resolve an open or acknowledged incident by hand'
  static override description =
    'A resolved or auto_resolved incident exits 4; an unknown id, or an incident that is not yours, exits 3. A later failure of the same kind opens a new incident. Needs the scope nodes:write.'
  static override examples = ['<%= config.bin %> incident resolve --id "$INCIDENT"', '<%= config.bin %> incident resolve --id "$INCIDENT" --json | jq -r .resolved_at']
  static override flags = {
    id: Flags.string({ description: 'incident id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Incident> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const incident = await api.post<Incident>(`/incidents/${encodeURIComponent(this.flags.id)}/resolve`, {}).catch(incidentNotFound(this.flags.id))
    if (!this.jsonEnabled()) this.log(describeMove(incident))
    return incident
  }
}
