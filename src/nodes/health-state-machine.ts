/**
 * The one health state machine (spec: Node rules; ARCHITECTURE.md "One state machine per
 * entity"). Every write of a node's `state`, `application_health` or `sync_status` goes through
 * `applyHealthUpdate`: it enforces the transition table, uses optimistic locking on `version`
 * (a concurrent writer gets a ConflictError, never a lost update) and writes exactly one health
 * event per change to the outbox in the caller's transaction.
 */
import type { Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { isConcurrentWriteFailure } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import { enqueueEvent, enqueueEvents } from '../events/outbox.js'
import { appendStateChange, appendStateChanges } from '../uptime/state-log.js'
import { findNode, type NodeRecord } from './node-store.js'
import {
  APPLICATION_HEALTH_VALUES,
  NODE_STATES,
  SYNC_STATUSES,
  canTransition,
  displayState,
  isTerminalState,
  type ApplicationHealth,
  type DisplayState,
  type NodeState,
  type SyncStatus,
} from './states.js'

/**
 * Who may write what. The spec names three writers (heartbeat evaluation -> state, policy
 * evaluation -> application_health, agents' sync events -> sync_status); the lifecycle
 * workflows of the spec's "Behaviours tied to states" also move `state`.
 */
export const STATE_WRITERS = [
  'heartbeat_evaluation',
  'provisioning',
  'migration',
  'termination',
  'upgrade',
  'maintenance_recovery',
] as const
export type StateWriter = (typeof STATE_WRITERS)[number]

export type HealthChange =
  | { writer: StateWriter; state: NodeState }
  | { writer: 'policy_evaluation'; application_health: ApplicationHealth }
  | { writer: 'sync_event'; sync_status: SyncStatus }

export type HealthWriter = HealthChange['writer']
export type HealthDimension = 'state' | 'application_health' | 'sync_status'

export interface HealthUpdate {
  nodeId: string
  change: HealthChange
  /** The version the caller read; when omitted, the version read inside this transaction. */
  expectedVersion?: number
  /**
   * The node as the caller already read it (a set-based evaluation cycle reads the fleet once).
   * The row is then not read again: the versioned update rejects a stale copy as a conflict.
   */
  current?: NodeRecord
  reason?: string
  now?: Date
}

export interface NodeHealth {
  state: NodeState
  sync_status: SyncStatus
  application_health: ApplicationHealth
}

export type HealthEvent = {
  event_id: string
  node_id: string
  subscription_id: string
  chain_profile_id: string
  writer: HealthWriter | 'compensation'
  dimension: HealthDimension
  from: string
  to: string
  forced: boolean
  reason: string | null
  previous: NodeHealth & { display_state: DisplayState }
  current: NodeHealth & { display_state: DisplayState }
  version: number
  occurred_at: string
}

export interface HealthUpdateResult {
  changed: boolean
  node: NodeRecord
  event?: HealthEvent
}

export function healthEventSubject(nodeId: string): string {
  return `events.node.${nodeId}.health_changed`
}

/** Applies one change through the transition table; a same-value write is a no-op. */
export async function applyHealthUpdate(trx: Queryable, update: HealthUpdate): Promise<HealthUpdateResult> {
  const change = validateChange(update.change)
  const node = await loadForWrite(trx, update)
  const health = checkedHealth(node, change)
  if (!health) return { changed: false, node }
  return write(trx, node, health, { writer: change.writer, dimension: dimensionOf(change), forced: false, reason: update.reason, now: update.now })
}

/** The node's health after `change`, undefined for no change; ConflictError when the rules forbid it. */
function checkedHealth(node: NodeRecord, change: HealthChange): NodeHealth | undefined {
  const next = nextHealth(node, change)
  if (next.unchanged) return undefined
  const dimension = dimensionOf(change)
  if (dimension === 'state') {
    const to = next.health.state
    if (!canTransition(node.state, to)) {
      throw new ConflictError(
        `node ${node.id} cannot move from ${node.state} to ${to}`,
        `allowed from ${node.state}: ${listOrNone(node.state)}`,
      )
    }
  } else if (isTerminalState(node.state)) {
    throw new ConflictError(`node ${node.id} is ${node.state}`, `${dimension} of a ${node.state} node stays unknown`)
  }
  if (node.state === 'maintenance' && (change.writer === 'heartbeat_evaluation' || change.writer === 'policy_evaluation')) {
    throw new ConflictError(`node ${node.id} is in maintenance`, 'heartbeat and policy evaluation skip nodes in maintenance')
  }
  return next.health
}

export interface ForcedStateUpdate {
  nodeId: string
  state: NodeState
  /** Why the table is being skipped; required, recorded in the health event. */
  reason: string
  expectedVersion?: number
  now?: Date
}

/**
 * Compensation only (a failed provisioning or migration): sets `state` without consulting the
 * transition table. Still optimistic-locked and still one health event. A terminal node stays
 * terminal: compensation never brings a terminated or failed node back.
 */
export async function forceNodeState(trx: Queryable, update: ForcedStateUpdate): Promise<HealthUpdateResult> {
  if (!NODE_STATES.includes(update.state)) throw new ValidationError(`unknown node state "${String(update.state)}"`)
  if (!update.reason?.trim()) throw new ValidationError('a forced state update needs a reason')
  const node = await loadForWrite(trx, update)
  if (node.state === update.state) return { changed: false, node }
  if (isTerminalState(node.state)) {
    throw new ConflictError(`node ${node.id} is ${node.state}`, 'a terminal state is final, even for a forced update')
  }
  const health = withTerminalReset({ state: update.state, sync_status: node.sync_status, application_health: node.application_health })
  return write(trx, node, health, { writer: 'compensation', dimension: 'state', forced: true, reason: update.reason, now: update.now })
}

function validateChange(change: HealthChange): HealthChange {
  const candidate = change as Partial<Record<string, unknown>>
  const keys = ['state', 'application_health', 'sync_status'].filter((k) => candidate[k] !== undefined)
  if (keys.length !== 1) throw new ValidationError('a health change sets exactly one of state, application_health, sync_status')
  if (change.writer === 'policy_evaluation') {
    if (!APPLICATION_HEALTH_VALUES.includes(change.application_health)) {
      throw new ValidationError('policy evaluation writes only application_health', `got ${keys[0]}=${String(candidate[keys[0] ?? ''])}`)
    }
  } else if (change.writer === 'sync_event') {
    if (!SYNC_STATUSES.includes(change.sync_status)) {
      throw new ValidationError('sync events write only sync_status', `got ${keys[0]}=${String(candidate[keys[0] ?? ''])}`)
    }
  } else if (STATE_WRITERS.includes(change.writer)) {
    if (!NODE_STATES.includes(change.state)) {
      throw new ValidationError(`${change.writer} writes only state`, `got ${keys[0]}=${String(candidate[keys[0] ?? ''])}`)
    }
  } else {
    throw new ValidationError(`unknown health writer "${String((change as { writer: unknown }).writer)}"`)
  }
  return change
}

function dimensionOf(change: HealthChange): HealthDimension {
  if ('state' in change) return 'state'
  if ('application_health' in change) return 'application_health'
  return 'sync_status'
}

function nextHealth(node: NodeRecord, change: HealthChange): { unchanged: boolean; health: NodeHealth } {
  const current: NodeHealth = { state: node.state, sync_status: node.sync_status, application_health: node.application_health }
  const health: NodeHealth = { ...current, ...pickValue(change) }
  const unchanged =
    health.state === current.state && health.sync_status === current.sync_status && health.application_health === current.application_health
  return { unchanged, health: withTerminalReset(health) }
}

function pickValue(change: HealthChange): Partial<NodeHealth> {
  if ('state' in change) return { state: change.state }
  if ('application_health' in change) return { application_health: change.application_health }
  return { sync_status: change.sync_status }
}

/** Spec: a move into a terminal state resets sync_status and application_health to unknown. */
function withTerminalReset(health: NodeHealth): NodeHealth {
  return isTerminalState(health.state) ? { state: health.state, sync_status: 'unknown', application_health: 'unknown' } : health
}

async function loadForWrite(trx: Queryable, update: { nodeId: string; expectedVersion?: number; current?: NodeRecord }): Promise<NodeRecord> {
  if (update.current && update.current.id !== update.nodeId) throw new ValidationError('the node passed as current is another node')
  const node = update.current ?? (await findNode(trx, update.nodeId))
  if (!node) throw new NotFoundError(`node ${update.nodeId} not found`)
  if (update.expectedVersion !== undefined && update.expectedVersion !== node.version) {
    throw versionConflict(node.id, update.expectedVersion, node.version)
  }
  return node
}

function versionConflict(nodeId: string, expected: number, actual: number | string): ConflictError {
  return new ConflictError(`node ${nodeId} was changed concurrently`, `expected version ${expected}, found ${actual}; re-read the node and retry`)
}

interface WriteMeta {
  writer: HealthWriter | 'compensation'
  dimension: HealthDimension
  forced: boolean
  reason: string | undefined
  now: Date | undefined
}

async function write(trx: Queryable, node: NodeRecord, health: NodeHealth, meta: WriteMeta): Promise<HealthUpdateResult> {
  try {
    return await writeVersioned(trx, node, health, meta)
  } catch (err) {
    if (isConcurrentWriteFailure(err)) throw versionConflict(node.id, node.version, 'a newer one')
    throw err
  }
}

async function writeVersioned(trx: Queryable, node: NodeRecord, health: NodeHealth, meta: WriteMeta): Promise<HealthUpdateResult> {
  const now = meta.now ?? new Date()
  const version = node.version + 1
  const updated = await trx('nodes').where({ id: node.id, version: node.version }).update({ ...changedColumns(node, health, now), version })
  if (updated !== 1) throw versionConflict(node.id, node.version, 'a newer one')
  if (health.state !== node.state) await appendStateChange(trx, { nodeId: node.id, state: health.state, at: now, writer: meta.writer, reason: meta.reason })
  const event = healthEventFor(node, health, meta, now)
  await enqueueEvent(trx, { subject: healthEventSubject(node.id), payload: event, messageId: event.event_id }, now)
  return { changed: true, event, node: nodeAfter(node, health, now) }
}

/**
 * The columns a change writes, without `version`. Only the columns that change: on SQLite a
 * column in SET rewrites every index over it (state is in three), even when its value stays.
 */
function changedColumns(node: NodeRecord, health: NodeHealth, now: Date): Record<string, unknown> {
  const changed: Record<string, unknown> = { updated_at: now }
  // A new state starts with a clean heartbeat record: failures counted in the old state (a node
  // that went down, then through maintenance) must not take the node down again at once.
  if (health.state !== node.state) Object.assign(changed, { state: health.state, state_changed_at: now, consecutive_failures: 0, heartbeat_checked_at: null })
  if (health.sync_status !== node.sync_status) changed.sync_status = health.sync_status
  if (health.application_health !== node.application_health) changed.application_health = health.application_health
  return changed
}

function healthEventFor(node: NodeRecord, health: NodeHealth, meta: WriteMeta, now: Date): HealthEvent {
  const previous: NodeHealth = { state: node.state, sync_status: node.sync_status, application_health: node.application_health }
  return {
    event_id: uuidv7(now.getTime()),
    node_id: node.id,
    subscription_id: node.subscription_id,
    chain_profile_id: node.chain_profile_id,
    writer: meta.writer,
    dimension: meta.dimension,
    from: previous[meta.dimension],
    to: health[meta.dimension],
    forced: meta.forced,
    reason: meta.reason ?? null,
    previous: { ...previous, display_state: displayState(previous) },
    current: { ...health, display_state: displayState(health) },
    version: node.version + 1,
    occurred_at: now.toISOString(),
  }
}

function nodeAfter(node: NodeRecord, health: NodeHealth, now: Date): NodeRecord {
  const stateChanged = health.state !== node.state
  return { ...node, ...health, version: node.version + 1, updated_at: now, ...(stateChanged ? { state_changed_at: now, consecutive_failures: 0 } : {}) }
}

export interface NodeHealthChange {
  /** The node as the caller read it; a node changed since is a conflict. */
  node: NodeRecord
  change: HealthChange
  reason: string
}

export interface HealthChangesResult {
  applied: Array<{ node: NodeRecord; event: HealthEvent }>
  /** Changes refused: the rules forbid them, or another writer changed the node first. */
  conflicts: Array<{ nodeId: string; message: string }>
}

/** Rows per statement of a set-based write: two parameters each in the version check. */
const CHANGES_PER_STATEMENT = 500

/**
 * Many changes at once (an evaluation cycle's): the same checks and writes as applyHealthUpdate
 * for each node — the rules, the versioned update, the state log, one health event — but one
 * UPDATE per distinct set of new values, one state-log close and insert, and one outbox insert
 * for the lot. A node whose version moved on is left out as a conflict, without failing the
 * others; a statement that loses to another writer as a whole throws ConflictError, and the
 * caller's transaction is to be rolled back.
 */
export async function applyHealthChanges(trx: Queryable, changes: readonly NodeHealthChange[], now: Date): Promise<HealthChangesResult> {
  const conflicts: HealthChangesResult['conflicts'] = []
  const byValues = new Map<string, Array<{ item: NodeHealthChange; health: NodeHealth }>>()
  const seen = new Set<string>()
  for (const item of changes) {
    try {
      // One change per node per call: a second would be judged against the node as it was.
      if (seen.has(item.node.id)) throw new ConflictError(`node ${item.node.id} has another change in this batch`, 'apply it after this one, against the node as it is then')
      seen.add(item.node.id)
      const health = checkedHealth(item.node, validateChange(item.change))
      if (!health) continue
      const key = JSON.stringify(changedColumns(item.node, health, now))
      const group = byValues.get(key)
      if (group) group.push({ item, health })
      else byValues.set(key, [{ item, health }])
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err
      conflicts.push({ nodeId: item.node.id, message: err.message })
    }
  }

  const applied: HealthChangesResult['applied'] = []
  for (const group of byValues.values()) {
    for (let i = 0; i < group.length; i += CHANGES_PER_STATEMENT) {
      const chunk = group.slice(i, i + CHANGES_PER_STATEMENT)
      const first = chunk[0] as (typeof chunk)[number]
      const rows = await trx('nodes')
        .whereIn(['id', 'version'], chunk.map(({ item }) => [item.node.id, item.node.version]))
        .update({ ...changedColumns(first.item.node, first.health, now), version: trx.raw('version + 1') })
        .returning('id')
        .catch((err: unknown) => {
          // The whole statement lost to another writer (a serialization failure, a deadlock, a
          // SQLite lock past busy_timeout): the transaction can do nothing more.
          if (isConcurrentWriteFailure(err)) throw new ConflictError(`${changes.length} nodes were changed concurrently`, 'the transaction is rolled back; re-read the nodes and retry')
          throw err
        }) as Array<{ id: string } | string>
      const written = new Set(rows.map((r) => (typeof r === 'string' ? r : r.id)))
      for (const { item, health } of chunk) {
        if (!written.has(item.node.id)) {
          conflicts.push({ nodeId: item.node.id, message: versionConflict(item.node.id, item.node.version, 'a newer one').message })
          continue
        }
        const meta: WriteMeta = { writer: item.change.writer, dimension: dimensionOf(item.change), forced: false, reason: item.reason, now }
        applied.push({ node: nodeAfter(item.node, health, now), event: healthEventFor(item.node, health, meta, now) })
      }
    }
  }
  const moves = applied.filter(({ event }) => event.dimension === 'state')
  await appendStateChanges(
    trx,
    moves.map(({ node, event }) => ({ nodeId: node.id, state: node.state, at: now, writer: event.writer, reason: event.reason })),
  )
  await enqueueEvents(
    trx,
    applied.map(({ event }) => ({ subject: healthEventSubject(event.node_id), payload: event, messageId: event.event_id })),
    now,
  )
  return { applied, conflicts }
}

function listOrNone(state: NodeState): string {
  const allowed = NODE_STATES.filter((to) => canTransition(state, to))
  return allowed.length > 0 ? allowed.join(', ') : 'none (terminal)'
}
