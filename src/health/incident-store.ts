/**
 * The `incidents` table: reading, raising with the dedup rule, and the user's status moves
 * (spec: "Incident", "Incident status"; docs/incidents.md). Every function takes the knex
 * handle first; writers that notify must be given a transaction, so the notification commits
 * with the change it reports.
 */
import type { Knex } from 'knex'
import type { Visibility } from '../auth/scopes.js'
import { fromJson, lockRow, toBool, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError } from '../errors.js'
import { createNotification } from '../notifications/notifications.js'
import { incidentNotification } from './incident-notifications.js'
import {
  canMoveIncident,
  INCIDENT_TRANSITIONS,
  INITIAL_SEVERITY,
  UNRESOLVED_STATUSES,
  type FlappingRule,
  type IncidentCategory,
  type IncidentSeverity,
  type IncidentStatus,
} from './incident-rules.js'

export type IncidentMetadata = Record<string, unknown>

export interface Incident {
  id: string
  node_id: string
  subscription_id: string
  user_id: string | null
  chain_profile_id: string
  category: IncidentCategory
  severity: IncidentSeverity
  status: IncidentStatus
  title: string
  description: string
  metadata: IncidentMetadata
  occurrence_count: number
  first_seen_at: string
  last_seen_at: string
  acknowledged_at: string | null
  acknowledged_by: string | null
  resolved_at: string | null
  resolved_by: string | null
  escalated_at: string | null
  is_flapping: boolean
  resolution_debounce: number
  version: number
  created_at: string
  updated_at: string
}

export const INCIDENT_COLUMNS = [
  'id',
  'node_id',
  'subscription_id',
  'user_id',
  'chain_profile_id',
  'category',
  'severity',
  'status',
  'title',
  'description',
  'metadata',
  'occurrence_count',
  'first_seen_at',
  'last_seen_at',
  'acknowledged_at',
  'acknowledged_by',
  'resolved_at',
  'resolved_by',
  'escalated_at',
  'is_flapping',
  'resolution_debounce',
  'version',
  'created_at',
  'updated_at',
] as const

/** Newest first, matching the (created_at, id) index. */
export const INCIDENT_LIST_ORDER = { sortColumn: 'created_at', idColumn: 'id' } as const

const iso = (value: unknown): string | null => toDateOrNull(value)?.toISOString() ?? null
const textOrNull = (value: unknown): string | null => (value === null || value === undefined ? null : String(value))

export function incidentFromRow(row: Record<string, unknown>): Incident {
  return {
    id: String(row.id),
    node_id: String(row.node_id),
    subscription_id: String(row.subscription_id),
    user_id: textOrNull(row.user_id),
    chain_profile_id: String(row.chain_profile_id),
    category: row.category as IncidentCategory,
    severity: row.severity as IncidentSeverity,
    status: row.status as IncidentStatus,
    title: String(row.title),
    description: String(row.description),
    metadata: fromJson<IncidentMetadata>(row.metadata),
    occurrence_count: Number(row.occurrence_count),
    first_seen_at: toDate(row.first_seen_at).toISOString(),
    last_seen_at: toDate(row.last_seen_at).toISOString(),
    acknowledged_at: iso(row.acknowledged_at),
    acknowledged_by: textOrNull(row.acknowledged_by),
    resolved_at: iso(row.resolved_at),
    resolved_by: textOrNull(row.resolved_by),
    escalated_at: iso(row.escalated_at),
    is_flapping: toBool(row.is_flapping),
    resolution_debounce: Number(row.resolution_debounce),
    version: Number(row.version),
    created_at: toDate(row.created_at).toISOString(),
    updated_at: toDate(row.updated_at).toISOString(),
  }
}

export interface IncidentFilters {
  status?: IncidentStatus | undefined
  severity?: IncidentSeverity | undefined
  category?: IncidentCategory | undefined
  nodeId?: string | undefined
  userId?: string | undefined
}

/** Incidents visible to the caller matching the filters; filters only, as `paginateKeyset` wants it. */
export function incidentQuery(db: Queryable, visibility: Visibility, filters: IncidentFilters = {}): Knex.QueryBuilder {
  const query = db('incidents')
  if (visibility.kind === 'owner') query.where('user_id', visibility.userId)
  if (filters.userId !== undefined) query.where('user_id', filters.userId)
  if (filters.status !== undefined) query.where('status', filters.status)
  if (filters.severity !== undefined) query.where('severity', filters.severity)
  if (filters.category !== undefined) query.where('category', filters.category)
  if (filters.nodeId !== undefined) query.where('node_id', filters.nodeId)
  return query
}

/** One incident as the caller may see it; undefined when it does not exist or is not theirs. */
export async function findIncident(db: Queryable, visibility: Visibility, id: string): Promise<Incident | undefined> {
  const row = (await incidentQuery(db, visibility)
    .where('id', id)
    .first(...INCIDENT_COLUMNS)) as Record<string, unknown> | undefined
  return row ? incidentFromRow(row) : undefined
}

/** The unresolved incident of (node, category), locked for the transaction on Postgres. */
async function findUnresolvedForUpdate(trx: Queryable, nodeId: string, category: IncidentCategory): Promise<Incident | undefined> {
  const query = trx('incidents').where({ node_id: nodeId, category }).whereIn('status', UNRESOLVED_STATUSES).first(...INCIDENT_COLUMNS)
  const row = (await lockRow(trx, query)) as Record<string, unknown> | undefined
  return row ? incidentFromRow(row) : undefined
}

export interface IncidentOccurrence {
  nodeId: string
  subscriptionId: string
  chainProfileId: string
  category: IncidentCategory
  /** Initial severity of the category unless given; a repeat never lowers an incident's severity. */
  severity?: IncidentSeverity
  occurredAt: Date
  title: string
  description: string
  /** Trigger-specific context; on a repeat it is stored as `metadata.last_occurrence`. */
  metadata: IncidentMetadata
  /** On a repeat, replace title and description with this occurrence's (a later, fuller account of the same failure). */
  restate?: boolean
}

export interface RaisedIncident {
  outcome: 'opened' | 'repeated'
  incident: Incident
  /** This occurrence made the incident flapping (it was not before). */
  flappingStarted: boolean
  /** The notification written, if any. */
  notified: 'incident_opened' | 'incident_escalated' | 'incident_flapping' | null
}

const SEVERITY_RANK: Readonly<Record<IncidentSeverity, number>> = { warning: 1, critical: 2 }

function higherSeverity(a: IncidentSeverity, b: IncidentSeverity): IncidentSeverity {
  return SEVERITY_RANK[b] > SEVERITY_RANK[a] ? b : a
}

/** The user owning the subscription, for notification routing; null once the subscription is gone. */
async function ownerOf(trx: Queryable, subscriptionId: string): Promise<string | null> {
  const row = (await trx('subscriptions').where({ id: subscriptionId }).first('user_id')) as { user_id: unknown } | undefined
  return row ? String(row.user_id) : null
}

/** Transitions of (node, category) within the flapping window ending at `at`, this one included. */
async function transitionsInWindow(trx: Queryable, nodeId: string, category: IncidentCategory, at: Date, rule: FlappingRule): Promise<number> {
  const row = (await trx('incident_occurrences')
    .where({ node_id: nodeId, category })
    .where('occurred_at', '>', new Date(at.getTime() - rule.windowMs))
    .where('occurred_at', '<=', at)
    .count({ n: '*' })
    .first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}

/**
 * Raises one occurrence under the dedup rule (spec: at most one incident per (node_id,
 * category) not resolved/auto_resolved; a repeat increments occurrence_count and updates
 * last_seen_at), records it for the flapping rule, and writes the notification, all in `trx`.
 *
 * Concurrency: two transactions raising the same (node, category) both find nothing and both
 * insert; the partial unique index lets one commit and fails the other, whose insert ran in a
 * savepoint, so it rolls back only that and retries as a repeat of the row now committed.
 */
export async function raiseIncident(trx: Knex.Transaction, occurrence: IncidentOccurrence, flapping: FlappingRule, now: Date): Promise<RaisedIncident> {
  const at = occurrence.occurredAt
  await trx('incident_occurrences').insert({ node_id: occurrence.nodeId, category: occurrence.category, occurred_at: at })
  const flappingNow = (await transitionsInWindow(trx, occurrence.nodeId, occurrence.category, at, flapping)) >= flapping.threshold
  const severity = occurrence.severity ?? INITIAL_SEVERITY[occurrence.category]

  for (let attempt = 1; ; attempt++) {
    const existing = await findUnresolvedForUpdate(trx, occurrence.nodeId, occurrence.category)
    if (existing) return repeat(trx, existing, occurrence, severity, flappingNow, now)
    const userId = await ownerOf(trx, occurrence.subscriptionId)
    const row = {
      id: uuidv7(now.getTime()),
      node_id: occurrence.nodeId,
      subscription_id: occurrence.subscriptionId,
      user_id: userId,
      chain_profile_id: occurrence.chainProfileId,
      category: occurrence.category,
      severity,
      status: 'open',
      title: occurrence.title,
      description: occurrence.description,
      metadata: toJson(occurrence.metadata),
      occurrence_count: 1,
      first_seen_at: at,
      last_seen_at: at,
      is_flapping: flappingNow,
      resolution_debounce: 0,
      version: 1,
      created_at: now,
      updated_at: now,
    }
    try {
      await trx.transaction(async (savepoint) => {
        await savepoint('incidents').insert(row)
      })
    } catch (err) {
      if (isUniqueViolation(err) && attempt < 3) continue
      throw err
    }
    const incident = incidentFromRow(row)
    const kind = flappingNow ? 'incident_flapping' : 'incident_opened'
    await notify(trx, incident, kind, now)
    return { outcome: 'opened', incident, flappingStarted: flappingNow, notified: incident.user_id ? kind : null }
  }
}

async function repeat(trx: Queryable, existing: Incident, occurrence: IncidentOccurrence, severity: IncidentSeverity, flappingNow: boolean, now: Date): Promise<RaisedIncident> {
  // Events can arrive out of order (redeliveries, concurrent handlers): the window only widens.
  const firstSeen = Math.min(Date.parse(existing.first_seen_at), occurrence.occurredAt.getTime())
  const lastSeen = Math.max(Date.parse(existing.last_seen_at), occurrence.occurredAt.getTime())
  const nextSeverity = higherSeverity(existing.severity, severity)
  const escalated = nextSeverity !== existing.severity
  const isFlapping = existing.is_flapping || flappingNow
  const changes = {
    occurrence_count: existing.occurrence_count + 1,
    first_seen_at: new Date(firstSeen),
    last_seen_at: new Date(lastSeen),
    severity: nextSeverity,
    escalated_at: escalated ? now : existing.escalated_at === null ? null : new Date(existing.escalated_at),
    metadata: toJson({ ...existing.metadata, last_occurrence: { ...occurrence.metadata, occurred_at: occurrence.occurredAt.toISOString() } }),
    ...(occurrence.restate ? { title: occurrence.title, description: occurrence.description } : {}),
    is_flapping: isFlapping,
    // A repeat is proof the node has not recovered: the debounce starts over.
    resolution_debounce: 0,
    version: existing.version + 1,
    updated_at: now,
  }
  // The row is locked (Postgres) or the writer is alone (SQLite): the version check cannot fail
  // here unless a status move slipped in without the lock, which then must not be overwritten.
  const updated = await trx('incidents').where({ id: existing.id, version: existing.version }).update(changes)
  if (updated !== 1) throw new ConflictError(`incident ${existing.id} was changed concurrently`, 'the event is redelivered and counted again')
  const incident: Incident = incidentFromRow({ ...existing, ...changes })
  const flappingStarted = isFlapping && !existing.is_flapping
  let kind: RaisedIncident['notified'] = null
  if (flappingStarted) kind = 'incident_flapping'
  else if (escalated && !isFlapping) kind = 'incident_escalated'
  if (kind) await notify(trx, incident, kind, now)
  return { outcome: 'repeated', incident, flappingStarted, notified: incident.user_id ? kind : null }
}

async function notify(trx: Queryable, incident: Incident, kind: NonNullable<RaisedIncident['notified']> | 'incident_resolved', now: Date): Promise<void> {
  const notification = incidentNotification(incident, kind)
  if (notification) await createNotification(trx, notification, now)
}

export interface IncidentMove {
  id: string
  to: 'acknowledged' | 'resolved'
  /** The caller's user id, recorded as acknowledged_by / resolved_by. */
  by: string
  visibility: Visibility
  now: Date
}

/**
 * A user's move (spec "Incident status": open -> acknowledged; open/acknowledged -> resolved).
 * A repeat (acknowledging an acknowledged incident, resolving a resolved one) returns it
 * unchanged with `changed: false`, as revoking a revoked API key does (docs/cli.md, "Repeats");
 * of two moves at once only the one whose conditional update wrote says `changed: true`. Another
 * move is a
 * ConflictError naming the current status. Optimistic locking on `version`:
 * a concurrent change (an auto-resolution in the same instant) is a ConflictError too, never a
 * silent overwrite. A manual resolution notifies the owner unless the incident is flapping.
 */
export type MovedIncident = Incident & { changed: boolean }

export async function moveIncident(trx: Knex.Transaction, move: IncidentMove): Promise<MovedIncident> {
  const incident = await findIncident(trx, move.visibility, move.id)
  if (!incident) throw new NotFoundError('not found', 'no incident with this id among the incidents you can see')
  if (incident.status === move.to) return { ...incident, changed: false }
  if (!canMoveIncident(incident.status, move.to)) throw statusConflict(incident, move.to)
  const changes: Record<string, unknown> =
    move.to === 'acknowledged'
      ? { status: 'acknowledged', acknowledged_at: move.now, acknowledged_by: move.by }
      : { status: 'resolved', resolved_at: move.now, resolved_by: move.by, resolution_debounce: 0 }
  Object.assign(changes, { version: incident.version + 1, updated_at: move.now })
  const updated = await trx('incidents').where({ id: incident.id, version: incident.version }).update(changes)
  if (updated !== 1) {
    const now = await findIncident(trx, move.visibility, move.id)
    // Another operator's same move in the same instant: a repeat, as above.
    if (now && now.status === move.to) return { ...now, changed: false }
    if (now && !canMoveIncident(now.status, move.to)) throw statusConflict(now, move.to)
    throw new ConflictError(`incident ${incident.id} was changed concurrently`, 'read it again and retry')
  }
  const moved = incidentFromRow({ ...incident, ...changes })
  if (move.to === 'resolved' && !moved.is_flapping) await notify(trx, moved, 'incident_resolved', move.now)
  return { ...moved, changed: true }
}

function statusConflict(incident: Incident, to: IncidentStatus): ConflictError {
  const allowed = INCIDENT_TRANSITIONS[incident.status]
  const verb = to === 'acknowledged' ? 'acknowledged' : 'resolved'
  return new ConflictError(
    `incident ${incident.id} is ${incident.status}; it cannot be ${verb}`,
    allowed.length > 0 ? `from ${incident.status} it can only become: ${allowed.join(', ')}` : `${incident.status} is final`,
  )
}
