/** Human output of the incident commands (the `--json` output is the commands' return value). */
import type { Incident } from '../health/incident-store.js'
import { NotFoundError } from '../errors.js'
import { renderTable } from './display.js'
import { age, moment } from './human-time.js'
import { alreadyNote, type Changed } from './repeats.js'

function statusText(i: Pick<Incident, 'status' | 'is_flapping'>): string {
  return i.is_flapping ? `${i.status} (flapping)` : i.status
}

export function renderIncidents(incidents: readonly Incident[]): string {
  return renderTable(incidents, [
    { header: 'id', value: (i) => i.id, id: true },
    { header: 'severity', value: (i) => i.severity, state: true },
    { header: 'status', value: (i) => statusText(i) },
    { header: 'category', value: (i) => i.category },
    { header: 'node', value: (i) => i.node_id, id: true },
    { header: 'count', value: (i) => String(i.occurrence_count) },
    { header: 'last seen', value: (i) => age(i.last_seen_at, { precise: true }) },
    { header: 'title', value: (i) => i.title },
  ])
}

export function noIncidents(filtered: boolean): string {
  return filtered ? 'No incidents match these filters.' : 'No incidents.'
}

export function describeIncident(i: Incident): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(16)}${value}`
  const by = (who: string | null) => (who ? ` by ${who}` : '')
  const lines = [
    `incident ${i.id}`,
    `  ${i.title}`,
    line('severity', i.escalated_at ? `${i.severity} (escalated ${age(i.escalated_at)})` : i.severity),
    line('status', statusText(i)),
    line('category', i.category),
    line('node', `${i.node_id} (${i.chain_profile_id})`),
    line('subscription', i.subscription_id),
    line('occurrences', String(i.occurrence_count)),
    line('first seen', moment(i.first_seen_at)),
    line('last seen', moment(i.last_seen_at)),
    line('acknowledged', i.acknowledged_at ? `${moment(i.acknowledged_at)}${by(i.acknowledged_by)}` : '-'),
    line('resolved', i.resolved_at ? `${moment(i.resolved_at)}${by(i.resolved_by)}` : '-'),
    '',
    `  ${i.description}`,
  ]
  return lines.join('\n')
}

export function describeMove(i: Changed<Incident>): string {
  if (!i.changed) return i.status === 'acknowledged' ? alreadyNote(`Incident ${i.id}`, 'acknowledged', i.acknowledged_at, i.acknowledged_by) : alreadyNote(`Incident ${i.id}`, 'resolved', i.resolved_at, i.resolved_by)
  return `${i.status === 'acknowledged' ? 'Acknowledged' : 'Resolved'} incident ${i.id}: ${i.title}`
}

/** An API 404 for one incident, said as a person needs it (exit 3 stays). */
export function incidentNotFound(id: string): (err: unknown) => never {
  return (err) => {
    if (err instanceof NotFoundError) throw new NotFoundError(`no incident ${id} among the incidents you can see`, 'list them with `nodeplane incident list`')
    throw err
  }
}
