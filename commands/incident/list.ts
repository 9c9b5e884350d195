import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { columnsFlag } from '../../src/cli/display.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { noIncidents, renderIncidents } from '../../src/cli/incident-views.js'
import { listAll } from '../../src/cli/pages.js'
import type { Incident } from '../../src/health/incident-store.js'
import { INCIDENT_CATEGORIES, INCIDENT_SEVERITIES, INCIDENT_STATUSES } from '../../src/health/incident-rules.js'

export default class IncidentList extends BaseCommand<typeof IncidentList> {
  static override summary = 'List incidents of your nodes (every incident with an admin key), newest first, through the API'
  static override description = 'Follows the pages to list them all, or stops after --limit incidents. Needs the scope nodes:read.'
  static override examples = [
    '<%= config.bin %> incident list',
    '<%= config.bin %> incident list --status open --severity critical',
    '<%= config.bin %> incident list --node 0193a1b2-… --json | jq -r ".incidents[] | select(.status == \\"open\\") | .id"',
  ]
  static override aliases = ['incident:ls']
  static override flags = {
    columns: columnsFlag,
    status: Flags.string({ description: 'only incidents in this status', options: [...INCIDENT_STATUSES] }),
    severity: Flags.string({ description: 'only incidents of this severity', options: [...INCIDENT_SEVERITIES] }),
    category: Flags.string({ description: 'only incidents of this category', options: [...INCIDENT_CATEGORIES] }),
    node: Flags.string({ description: 'only the incidents of this node id' }),
    user: Flags.string({ description: 'admin only: the incidents of this user id' }),
    limit: Flags.integer({ description: 'list at most this many incidents (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ incidents: Incident[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const filters = new URLSearchParams()
    if (this.flags.status !== undefined) filters.set('status', this.flags.status)
    if (this.flags.severity !== undefined) filters.set('severity', this.flags.severity)
    if (this.flags.category !== undefined) filters.set('category', this.flags.category)
    if (this.flags.node !== undefined) filters.set('node_id', this.flags.node)
    if (this.flags.user !== undefined) filters.set('user_id', this.flags.user)
    const path = filters.size > 0 ? `/incidents?${filters.toString()}` : '/incidents'
    const incidents = await listAll<Incident>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) this.log(incidents.length === 0 ? noIncidents(filters.size > 0) : renderIncidents(incidents))
    return { incidents }
  }
}
