/**
 * The user notifications incidents write (docs/incidents.md, "Notifications"): a new incident,
 * a severity escalation, the start of flapping (after which nothing more is said until it
 * settles), and a resolution. An incident without an owner (its subscription is gone) notifies
 * nobody.
 */
import type { NewNotification } from '../notifications/notifications.js'
import type { Incident } from './incident-store.js'

export type IncidentNotificationKind = 'incident_opened' | 'incident_escalated' | 'incident_flapping' | 'incident_resolved'

function resolutionText(incident: Pick<Incident, 'status' | 'resolved_by'>): string {
  if (incident.status === 'auto_resolved') return 'The node recovered and the incident was closed automatically.'
  return 'The incident was resolved by hand.'
}

export function incidentNotification(incident: Incident, kind: IncidentNotificationKind): NewNotification | undefined {
  if (!incident.user_id) return undefined
  const data = { incident_id: incident.id, node_id: incident.node_id, category: incident.category, severity: incident.severity, status: incident.status }
  const base = { userId: incident.user_id, kind, data }
  switch (kind) {
    case 'incident_opened':
      return { ...base, title: `Incident (${incident.severity}): ${incident.title}`, body: `${incident.description} See \`nodeplane incident show --id ${incident.id}\`.` }
    case 'incident_escalated':
      return {
        ...base,
        title: `Incident escalated to ${incident.severity}: ${incident.title}`,
        body: `Open since ${incident.first_seen_at} and not recovered; its severity rose to ${incident.severity}. Acknowledge it with \`nodeplane incident ack --id ${incident.id}\` once someone is on it.`,
      }
    case 'incident_flapping':
      return {
        ...base,
        title: `Flapping: ${incident.title}`,
        body: `This keeps happening (${incident.occurrence_count} time(s) on this incident) and coming back. Further notifications about it are held back until it has been quiet for a while; the incident stays open meanwhile.`,
      }
    case 'incident_resolved':
      return { ...base, title: `Resolved: ${incident.title}`, body: resolutionText(incident) }
  }
}
