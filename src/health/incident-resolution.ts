/**
 * The incidents' part of each health-evaluation cycle (docs/incidents.md): auto-resolution with
 * `resolution_debounce`, the end of flapping, escalation of long-open warnings, and housekeeping
 * of the flapping window. Set-based: a fixed handful of statements per call for the whole fleet,
 * whatever the number of incidents, in one transaction (notifications commit with the moves).
 *
 * Per call, in this order:
 * 1. incidents whose node is gone (deleted, terminated, or its subscription terminated) are
 *    auto-resolved at once (`resolved_by = 'auto:node_gone'`), without a notification: the
 *    user was told about the termination itself;
 * 2. flapping ends for unresolved incidents without a new occurrence for the quiet period;
 * 3. an unresolved, non-flapping incident of an auto-resolving category whose node is back
 *    (node_down: state healthy; app_*: application_health ok; sync_stalled: sync_status
 *    synced) counts one more recovered cycle; any other unresolved incident's counter is 0;
 * 4. counters that reached K become `auto_resolved` (`resolved_by = 'auto'`) and notify;
 * 5. an open (not acknowledged) warning, not recovering, not flapping, first seen longer ago
 *    than the escalation delay becomes critical once, and notifies;
 * 6. occurrences older than the flapping window are deleted.
 */
import type { Knex } from 'knex'
import type { Queryable } from '../db/knex.js'
import type { Logger } from '../log.js'
import { createNotifications, type NewNotification } from '../notifications/notifications.js'
import { incidentNotification, type IncidentNotificationKind } from './incident-notifications.js'
import { INCIDENT_COLUMNS, incidentFromRow } from './incident-store.js'
import { AUTO_RESOLVING_CATEGORIES, DEFAULT_INCIDENT_SETTINGS, UNRESOLVED_STATUSES, type FlappingRule } from './incident-rules.js'

export interface IncidentResolutionOptions {
  now: Date
  /** K (INCIDENT_RESOLUTION_DEBOUNCE): recovered cycles in a row before an incident auto-resolves. */
  debounce: number
  logger: Logger
  /** INCIDENT_FLAP_*; the documented defaults when absent. */
  flapping?: FlappingRule
  /** INCIDENT_ESCALATE_AFTER; the documented default when absent. */
  escalateAfterMs?: number
}

export interface IncidentResolutionResult {
  /** Auto-resolved because the node recovered for K cycles. */
  auto_resolved: number
  /** Auto-resolved because the node is gone. */
  node_gone: number
  /** Unresolved incidents whose node counts as recovered this cycle, below K. */
  recovering: number
  flapping_cleared: number
  escalated: number
}

// The node is back for the incident's category (spec: "node returns to healthy").
const RECOVERED_SQL = `EXISTS (SELECT 1 FROM nodes n WHERE n.id = incidents.node_id AND (
  (incidents.category = 'node_down' AND n.state = 'healthy')
  OR (incidents.category IN ('app_critical', 'app_degraded') AND n.application_health = 'ok')
  OR (incidents.category = 'sync_stalled' AND n.sync_status = 'synced')))`

const NODE_PRESENT_SQL = `EXISTS (SELECT 1 FROM nodes n JOIN subscriptions s ON s.id = n.subscription_id
  WHERE n.id = incidents.node_id AND n.state <> 'terminated' AND s.status <> 'terminated')`

function isTransaction(db: Queryable): db is Knex.Transaction {
  return (db as Knex.Transaction).isTransaction === true
}

export async function advanceIncidentResolution(db: Queryable, options: IncidentResolutionOptions): Promise<IncidentResolutionResult> {
  if (!Number.isInteger(options.debounce) || options.debounce < 1) throw new RangeError(`resolution debounce must be a positive integer, got ${options.debounce}`)
  const run = (trx: Knex.Transaction) => advance(trx, options)
  return isTransaction(db) ? run(db) : db.transaction(run)
}

async function advance(trx: Knex.Transaction, options: IncidentResolutionOptions): Promise<IncidentResolutionResult> {
  const { now, debounce } = options
  const flapping = options.flapping ?? DEFAULT_INCIDENT_SETTINGS.flapping
  const escalateAfterMs = options.escalateAfterMs ?? DEFAULT_INCIDENT_SETTINGS.escalateAfterMs
  const unresolved = () => trx('incidents').whereIn('status', UNRESOLVED_STATUSES)
  const bump = { version: trx.raw('version + 1'), updated_at: now }

  const nodeGone = Number(
    await unresolved()
      .whereRaw(`NOT ${NODE_PRESENT_SQL}`)
      .update({ status: 'auto_resolved', resolved_at: now, resolved_by: 'auto:node_gone', resolution_debounce: 0, ...bump }),
  )

  const flappingCleared = Number(
    await unresolved()
      .where('is_flapping', true)
      .where('last_seen_at', '<=', new Date(now.getTime() - flapping.quietMs))
      .update({ is_flapping: false, ...bump }),
  )

  // The counter is bookkeeping, not a change a user acts on: no version bump, so an
  // acknowledgement racing a cycle does not fail on it.
  const counting = () => unresolved().whereIn('category', AUTO_RESOLVING_CATEGORIES).where('is_flapping', false).whereRaw(RECOVERED_SQL)
  await counting().update({ resolution_debounce: trx.raw('resolution_debounce + 1') })
  await unresolved()
    .where('resolution_debounce', '>', 0)
    .whereNotIn('id', counting().select('id'))
    .update({ resolution_debounce: 0 })

  const resolvedRows = (await unresolved()
    .where('resolution_debounce', '>=', debounce)
    .update({ status: 'auto_resolved', resolved_at: now, resolved_by: 'auto', ...bump })
    .returning([...INCIDENT_COLUMNS])) as Array<Record<string, unknown>>

  const recovering = Number(((await unresolved().where('resolution_debounce', '>', 0).count({ n: '*' }).first()) as { n: number | string } | undefined)?.n ?? 0)

  const escalatedRows = (await trx('incidents')
    .where({ status: 'open', severity: 'warning', is_flapping: false, resolution_debounce: 0 })
    .whereNull('escalated_at')
    .where('first_seen_at', '<=', new Date(now.getTime() - escalateAfterMs))
    .update({ severity: 'critical', escalated_at: now, ...bump })
    .returning([...INCIDENT_COLUMNS])) as Array<Record<string, unknown>>

  await trx('incident_occurrences')
    .where('occurred_at', '<=', new Date(now.getTime() - flapping.windowMs))
    .del()

  const notifications: NewNotification[] = []
  const collect = (rows: Array<Record<string, unknown>>, kind: IncidentNotificationKind) => {
    for (const row of rows) {
      const notification = incidentNotification(incidentFromRow(row), kind)
      if (notification) notifications.push(notification)
    }
  }
  collect(resolvedRows, 'incident_resolved')
  collect(escalatedRows, 'incident_escalated')
  await createNotifications(trx, notifications, now)

  const result: IncidentResolutionResult = {
    auto_resolved: resolvedRows.length,
    node_gone: nodeGone,
    recovering,
    flapping_cleared: flappingCleared,
    escalated: escalatedRows.length,
  }
  if (result.auto_resolved + result.node_gone + result.flapping_cleared + result.escalated > 0) {
    // The daemon's logger already carries `component: 'incidents'`.
    options.logger.info(result, 'incident cycle')
  }
  return result
}
