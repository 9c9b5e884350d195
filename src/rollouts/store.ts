/**
 * Rollout, rollout-node and rollout-group rows: one exported function per database operation,
 * the caller owns the transaction (STYLE.md, Storage).
 *
 * Every status write goes through `updateRolloutStatus` / `updateGroupStatus`: the move must be
 * in the table of src/rollouts/states.ts, and the row's `version` must still be the one read
 * (optimistic locking), so two writers racing (an operator's cancel and the workflow's
 * completion) never both win: the second gets a ConflictError.
 */
import { affectedRows, fromJson, toBool, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isConcurrentWriteFailure, isUniqueViolation } from '../db/errors.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import type { UpgradePhase } from '../agent-gateway/protocol.js'
import { ConflictError, NotFoundError } from '../errors.js'
import { paginateKeyset, type Page } from '../http/pagination.js'
import type { MigrationType, RolloutManifestData } from './manifests.js'
import {
  ACTIVE_GROUP_STATUSES,
  ACTIVE_ROLLOUT_STATUSES,
  ROLLOUT_GROUP_TRANSITIONS,
  ROLLOUT_TRANSITIONS,
  canMoveGroup,
  canMoveRollout,
  type FailurePolicy,
  type RolloutGroupStatus,
  type RolloutNodeStatus,
  type RolloutStatus,
  type RolloutStrategy,
} from './states.js'

export interface RolloutRecord {
  id: string
  group_id: string | null
  component_index: number | null
  upgrade_id: string | null
  chain_profile_id: string
  node_type: string
  binary_name: string
  source_version: string
  target_version: string
  target_binary_url: string
  /** `sha256:<hex>` */
  target_binary_checksum: string
  strategy: RolloutStrategy
  status: RolloutStatus
  batch_size: number
  canary_size: number | null
  failure_threshold: number
  health_wait_duration_ms: number
  total_nodes: number
  succeeded_nodes: number
  failed_nodes: number
  manifest_content_hash: string | null
  migration_type: MigrationType | null
  /** recovery_plan, config_changes, state compatibility (auto mode); null for a manual rollout. */
  manifest: RolloutManifestData | null
  created_by: string
  reason: string | null
  /** Why it is paused: operator | failure_threshold | canary_failed | rollback (migration 0009). */
  pause_reason: string | null
  /** What it waits for, e.g. approve_canary. */
  awaiting: string | null
  current_batch: number | null
  batch_count: number | null
  /** The failure threshold was overridden (`force`). */
  forced: boolean
  error_message: string | null
  scheduled_at: Date | null
  started_at: Date | null
  completed_at: Date | null
  version: number
  created_at: Date
  updated_at: Date
}

export interface RolloutNodeRecord {
  id: string
  rollout_id: string
  node_id: string
  batch_index: number
  status: RolloutNodeStatus
  upgrade_phase: UpgradePhase | null
  previous_version: string | null
  previous_binary_url: string | null
  previous_checksum: string | null
  error_message: string | null
  attempt_count: number
  started_at: Date | null
  completed_at: Date | null
  created_at: Date
  updated_at: Date
}

/** One entry of a group's component_order, resolved at creation (src/rollouts/create.ts). */
export interface GroupComponent {
  binary_name: string
  node_type: string
  version: string
  url: string
  /** `sha256:<hex>` */
  checksum: string
  upgrade_id: string | null
  migration_type: MigrationType
  manifest_content_hash: string | null
  /** The manifest's recovery_plan, config_changes and state compatibility; null without a manifest. */
  manifest: RolloutManifestData | null
}

export interface RolloutGroupRecord {
  id: string
  chain_profile_id: string
  node_type: string
  status: RolloutGroupStatus
  failure_policy: FailurePolicy
  component_order: GroupComponent[]
  /** binary_name -> version */
  desired_versions: Record<string, string>
  strategy: RolloutStrategy
  batch_size: number
  canary_size: number | null
  failure_threshold: number
  health_wait_duration_ms: number
  current_component_index: number | null
  created_by: string
  reason: string | null
  pause_reason: string | null
  error_message: string | null
  started_at: Date | null
  completed_at: Date | null
  version: number
  created_at: Date
  updated_at: Date
}

type Row = Record<string, unknown>

const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v))
const int = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v))

export function rolloutFromRow(row: Row): RolloutRecord {
  return {
    id: String(row.id),
    group_id: str(row.group_id),
    component_index: int(row.component_index),
    upgrade_id: str(row.upgrade_id),
    chain_profile_id: String(row.chain_profile_id),
    node_type: String(row.node_type),
    binary_name: String(row.binary_name),
    source_version: String(row.source_version),
    target_version: String(row.target_version),
    target_binary_url: String(row.target_binary_url),
    target_binary_checksum: String(row.target_binary_checksum),
    strategy: row.strategy as RolloutStrategy,
    status: row.status as RolloutStatus,
    batch_size: Number(row.batch_size),
    canary_size: int(row.canary_size),
    failure_threshold: Number(row.failure_threshold),
    health_wait_duration_ms: Number(row.health_wait_duration_ms),
    total_nodes: Number(row.total_nodes),
    succeeded_nodes: Number(row.succeeded_nodes),
    failed_nodes: Number(row.failed_nodes),
    manifest_content_hash: str(row.manifest_content_hash),
    migration_type: (str(row.migration_type) as MigrationType | null) ?? null,
    manifest: row.manifest === null || row.manifest === undefined ? null : fromJson<RolloutManifestData>(row.manifest),
    created_by: String(row.created_by),
    reason: str(row.reason),
    pause_reason: str(row.pause_reason),
    awaiting: str(row.awaiting),
    current_batch: int(row.current_batch),
    batch_count: int(row.batch_count),
    forced: toBool(row.forced),
    error_message: str(row.error_message),
    scheduled_at: toDateOrNull(row.scheduled_at),
    started_at: toDateOrNull(row.started_at),
    completed_at: toDateOrNull(row.completed_at),
    version: Number(row.version),
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

export function rolloutNodeFromRow(row: Row): RolloutNodeRecord {
  return {
    id: String(row.id),
    rollout_id: String(row.rollout_id),
    node_id: String(row.node_id),
    batch_index: Number(row.batch_index),
    status: row.status as RolloutNodeStatus,
    upgrade_phase: (str(row.upgrade_phase) as UpgradePhase | null) ?? null,
    previous_version: str(row.previous_version),
    previous_binary_url: str(row.previous_binary_url),
    previous_checksum: str(row.previous_checksum),
    error_message: str(row.error_message),
    attempt_count: Number(row.attempt_count),
    started_at: toDateOrNull(row.started_at),
    completed_at: toDateOrNull(row.completed_at),
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

export function rolloutGroupFromRow(row: Row): RolloutGroupRecord {
  return {
    id: String(row.id),
    chain_profile_id: String(row.chain_profile_id),
    node_type: String(row.node_type),
    status: row.status as RolloutGroupStatus,
    failure_policy: row.failure_policy as FailurePolicy,
    component_order: fromJson<GroupComponent[]>(row.component_order),
    desired_versions: fromJson<Record<string, string>>(row.desired_versions),
    strategy: row.strategy as RolloutStrategy,
    batch_size: Number(row.batch_size),
    canary_size: int(row.canary_size),
    failure_threshold: Number(row.failure_threshold),
    health_wait_duration_ms: Number(row.health_wait_duration_ms),
    current_component_index: int(row.current_component_index),
    created_by: String(row.created_by),
    reason: str(row.reason),
    pause_reason: str(row.pause_reason),
    error_message: str(row.error_message),
    started_at: toDateOrNull(row.started_at),
    completed_at: toDateOrNull(row.completed_at),
    version: Number(row.version),
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

// ---------------------------------------------------------------------------------------------
// Reads

/** The rollout, or undefined (also for a malformed id: it never reaches a uuid column). */
export async function getRollout(db: Queryable, id: string): Promise<RolloutRecord | undefined> {
  if (!isUuid(id)) return undefined
  const row = (await db('rollouts').where({ id: id.toLowerCase() }).first()) as Row | undefined
  return row ? rolloutFromRow(row) : undefined
}

/** The rollout, or NotFoundError. */
export async function requireRollout(db: Queryable, id: string): Promise<RolloutRecord> {
  const rollout = await getRollout(db, id)
  if (!rollout) throw new NotFoundError('not found', `no rollout ${id}`)
  return rollout
}

/** The rollout of a chain profile in pending, scheduled, running or paused (at most one: spec). */
export async function findActiveRollout(db: Queryable, chainProfileId: string): Promise<RolloutRecord | undefined> {
  const row = (await db('rollouts').where({ chain_profile_id: chainProfileId }).whereIn('status', ACTIVE_ROLLOUT_STATUSES).first()) as Row | undefined
  return row ? rolloutFromRow(row) : undefined
}

export interface RolloutFilters {
  status?: RolloutStatus | undefined
  chainProfileId?: string | undefined
  groupId?: string | undefined
}

export interface PageRequest {
  limit: number
  cursor?: string | undefined
}

/** Rollouts newest first, one page at a time (keyset on created_at, id: src/http/pagination.ts). */
export async function listRollouts(db: Queryable, filters: RolloutFilters, page: PageRequest): Promise<Page<RolloutRecord>> {
  const query = db('rollouts')
  if (filters.status) query.where('status', filters.status)
  if (filters.chainProfileId) query.where('chain_profile_id', filters.chainProfileId)
  if (filters.groupId) query.where('group_id', filters.groupId)
  return paginateKeyset(db, query, { sortColumn: 'created_at', idColumn: 'id', direction: 'desc', limit: page.limit, cursor: page.cursor, map: rolloutFromRow })
}

/** Every node of a rollout, by batch then node id (the order batches run in). */
export async function listRolloutNodes(db: Queryable, rolloutId: string): Promise<RolloutNodeRecord[]> {
  if (!isUuid(rolloutId)) return []
  const rows = (await db('rollout_nodes').where({ rollout_id: rolloutId.toLowerCase() }).orderBy([{ column: 'batch_index' }, { column: 'node_id' }])) as Row[]
  return rows.map(rolloutNodeFromRow)
}

/** One page of a rollout's nodes in the same order (batch_index, then node_id). */
export async function pageRolloutNodes(db: Queryable, rolloutId: string, page: PageRequest): Promise<Page<RolloutNodeRecord>> {
  return paginateKeyset(db, db('rollout_nodes').where({ rollout_id: rolloutId.toLowerCase() }), {
    sortColumn: 'batch_index',
    idColumn: 'node_id',
    direction: 'asc',
    limit: page.limit,
    cursor: page.cursor,
    map: rolloutNodeFromRow,
  })
}

export async function getRolloutNode(db: Queryable, rolloutId: string, nodeId: string): Promise<RolloutNodeRecord | undefined> {
  if (!isUuid(rolloutId) || !isUuid(nodeId)) return undefined
  const row = (await db('rollout_nodes').where({ rollout_id: rolloutId.toLowerCase(), node_id: nodeId.toLowerCase() }).first()) as Row | undefined
  return row ? rolloutNodeFromRow(row) : undefined
}

export type NodeStatusCounts = Record<RolloutNodeStatus, number>

/** How many of a rollout's nodes are in each status (every status present, zeros included). */
export async function countRolloutNodes(db: Queryable, rolloutId: string): Promise<NodeStatusCounts> {
  const counts: NodeStatusCounts = { pending: 0, in_progress: 0, validating: 0, succeeded: 0, failed: 0, rolled_back: 0, skipped: 0 }
  if (!isUuid(rolloutId)) return counts
  const rows = (await db('rollout_nodes').where({ rollout_id: rolloutId.toLowerCase() }).select('status').count({ n: '*' }).groupBy('status')) as { status: string; n: unknown }[]
  for (const row of rows) if (row.status in counts) counts[row.status as RolloutNodeStatus] = Number(row.n)
  return counts
}

export async function getRolloutGroup(db: Queryable, id: string): Promise<RolloutGroupRecord | undefined> {
  if (!isUuid(id)) return undefined
  const row = (await db('rollout_groups').where({ id: id.toLowerCase() }).first()) as Row | undefined
  return row ? rolloutGroupFromRow(row) : undefined
}

export async function requireRolloutGroup(db: Queryable, id: string): Promise<RolloutGroupRecord> {
  const group = await getRolloutGroup(db, id)
  if (!group) throw new NotFoundError('not found', `no rollout group ${id}`)
  return group
}

export async function findActiveGroup(db: Queryable, chainProfileId: string): Promise<RolloutGroupRecord | undefined> {
  const row = (await db('rollout_groups').where({ chain_profile_id: chainProfileId }).whereIn('status', ACTIVE_GROUP_STATUSES).first()) as Row | undefined
  return row ? rolloutGroupFromRow(row) : undefined
}

/** A group's rollouts by component_index, then creation (a component may have more than one: a rollback). */
export async function listGroupRollouts(db: Queryable, groupId: string): Promise<RolloutRecord[]> {
  if (!isUuid(groupId)) return []
  const rows = (await db('rollouts')
    .where({ group_id: groupId.toLowerCase() })
    .orderBy([{ column: 'component_index' }, { column: 'created_at' }, { column: 'id' }])) as Row[]
  return rows.map(rolloutFromRow)
}

// ---------------------------------------------------------------------------------------------
// Inserts

/** A rollout as it is inserted (status `pending`, counters 0, version 1). */
export type NewRollout = Pick<
  RolloutRecord,
  | 'chain_profile_id'
  | 'node_type'
  | 'binary_name'
  | 'source_version'
  | 'target_version'
  | 'target_binary_url'
  | 'target_binary_checksum'
  | 'strategy'
  | 'batch_size'
  | 'canary_size'
  | 'failure_threshold'
  | 'health_wait_duration_ms'
  | 'created_by'
> &
  Partial<Pick<RolloutRecord, 'id' | 'group_id' | 'component_index' | 'upgrade_id' | 'manifest_content_hash' | 'migration_type' | 'manifest' | 'reason' | 'scheduled_at'>>

/**
 * Inserts a `pending` rollout. The partial unique index "one active rollout per chain profile"
 * decides races (spec, Rollout): a violation is a ConflictError naming the active rollout. The
 * insert runs in its own savepoint so the caller's transaction survives the violation on Postgres.
 */
export async function insertRollout(db: Queryable, rollout: NewRollout, now: Date): Promise<RolloutRecord> {
  const row = {
    id: rollout.id ?? uuidv7(now.getTime()),
    group_id: rollout.group_id ?? null,
    component_index: rollout.component_index ?? null,
    upgrade_id: rollout.upgrade_id ?? null,
    chain_profile_id: rollout.chain_profile_id,
    node_type: rollout.node_type,
    binary_name: rollout.binary_name,
    source_version: rollout.source_version,
    target_version: rollout.target_version,
    target_binary_url: rollout.target_binary_url,
    target_binary_checksum: rollout.target_binary_checksum,
    strategy: rollout.strategy,
    status: 'pending' satisfies RolloutStatus,
    batch_size: rollout.batch_size,
    canary_size: rollout.canary_size,
    failure_threshold: rollout.failure_threshold,
    health_wait_duration_ms: rollout.health_wait_duration_ms,
    total_nodes: 0,
    succeeded_nodes: 0,
    failed_nodes: 0,
    manifest_content_hash: rollout.manifest_content_hash ?? null,
    migration_type: rollout.migration_type ?? null,
    manifest: rollout.manifest ? toJson(rollout.manifest) : null,
    created_by: rollout.created_by,
    reason: rollout.reason ?? null,
    scheduled_at: rollout.scheduled_at ?? null,
    forced: false,
    version: 1,
    created_at: now,
    updated_at: now,
  }
  try {
    await db.transaction((trx) => trx('rollouts').insert(row))
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
    const active = await findActiveRollout(db, rollout.chain_profile_id)
    throw new ConflictError(
      `chain ${rollout.chain_profile_id} already has an active rollout${active ? ` (${active.id}, ${active.status})` : ''}`,
      `at most one rollout per chain profile may be pending, scheduled, running or paused${active ? `; finish or cancel rollout ${active.id} first` : ''}`,
    )
  }
  return rolloutFromRow({ ...row, manifest: rollout.manifest ?? null, pause_reason: null, awaiting: null, current_batch: null, batch_count: null, error_message: null, started_at: null, completed_at: null })
}

export type NewRolloutGroup = Pick<
  RolloutGroupRecord,
  | 'chain_profile_id'
  | 'node_type'
  | 'failure_policy'
  | 'component_order'
  | 'desired_versions'
  | 'strategy'
  | 'batch_size'
  | 'canary_size'
  | 'failure_threshold'
  | 'health_wait_duration_ms'
  | 'created_by'
> &
  Partial<Pick<RolloutGroupRecord, 'id' | 'reason'>>

/** Inserts a `pending` group; the one-active-group index violation is a ConflictError naming the active group. */
export async function insertRolloutGroup(db: Queryable, group: NewRolloutGroup, now: Date): Promise<RolloutGroupRecord> {
  const row = {
    id: group.id ?? uuidv7(now.getTime()),
    chain_profile_id: group.chain_profile_id,
    node_type: group.node_type,
    status: 'pending' satisfies RolloutGroupStatus,
    failure_policy: group.failure_policy,
    component_order: toJson(group.component_order),
    desired_versions: toJson(group.desired_versions),
    strategy: group.strategy,
    batch_size: group.batch_size,
    canary_size: group.canary_size,
    failure_threshold: group.failure_threshold,
    health_wait_duration_ms: group.health_wait_duration_ms,
    current_component_index: null,
    created_by: group.created_by,
    reason: group.reason ?? null,
    version: 1,
    created_at: now,
    updated_at: now,
  }
  try {
    await db.transaction((trx) => trx('rollout_groups').insert(row))
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
    const active = await findActiveGroup(db, group.chain_profile_id)
    throw new ConflictError(
      `chain ${group.chain_profile_id} already has an active rollout group${active ? ` (${active.id}, ${active.status})` : ''}`,
      `at most one rollout group per chain profile may be pending, running or paused${active ? `; finish or cancel group ${active.id} first` : ''}`,
    )
  }
  return rolloutGroupFromRow({
    ...row,
    component_order: group.component_order,
    desired_versions: group.desired_versions,
    pause_reason: null,
    error_message: null,
    started_at: null,
    completed_at: null,
  })
}

export interface NewRolloutNode {
  node_id: string
  batch_index: number
  previous_version?: string | null
  previous_binary_url?: string | null
  previous_checksum?: string | null
}

/** Inserts a rollout's planned nodes (status `pending`), in chunks; (rollout_id, node_id) is unique. */
export async function insertRolloutNodes(db: Queryable, rolloutId: string, nodes: readonly NewRolloutNode[], now: Date): Promise<RolloutNodeRecord[]> {
  const rows = nodes.map((n) => ({
    id: uuidv7(now.getTime()),
    rollout_id: rolloutId,
    node_id: n.node_id,
    batch_index: n.batch_index,
    status: 'pending' satisfies RolloutNodeStatus,
    upgrade_phase: null,
    previous_version: n.previous_version ?? null,
    previous_binary_url: n.previous_binary_url ?? null,
    previous_checksum: n.previous_checksum ?? null,
    error_message: null,
    attempt_count: 0,
    started_at: null,
    completed_at: null,
    created_at: now,
    updated_at: now,
  }))
  // SQLite binds at most 32766 parameters a statement; 15 columns x 500 stays far below.
  for (let i = 0; i < rows.length; i += 500) await db('rollout_nodes').insert(rows.slice(i, i + 500))
  return rows.map(rolloutNodeFromRow)
}

export type RolloutNodeFields = Partial<
  Pick<RolloutNodeRecord, 'status' | 'upgrade_phase' | 'previous_version' | 'previous_binary_url' | 'previous_checksum' | 'error_message' | 'attempt_count' | 'started_at' | 'completed_at' | 'batch_index'>
>

/** Updates one rollout node (no version column: a node is written by its one per-node step at a time). */
export async function updateRolloutNode(db: Queryable, rolloutId: string, nodeId: string, fields: RolloutNodeFields, now: Date): Promise<RolloutNodeRecord> {
  const updated = affectedRows(await db('rollout_nodes').where({ rollout_id: rolloutId, node_id: nodeId }).update({ ...defined(fields), updated_at: now }))
  const node = updated === 1 ? await getRolloutNode(db, rolloutId, nodeId) : undefined
  if (!node) throw new NotFoundError('not found', `node ${nodeId} is not part of rollout ${rolloutId}`)
  return node
}

// ---------------------------------------------------------------------------------------------
// Status moves and versioned updates

/** Columns a status move (or a versioned update) may set alongside. */
export type RolloutFields = Partial<
  Pick<
    RolloutRecord,
    | 'pause_reason'
    | 'awaiting'
    | 'current_batch'
    | 'batch_count'
    | 'forced'
    | 'error_message'
    | 'total_nodes'
    | 'succeeded_nodes'
    | 'failed_nodes'
    | 'scheduled_at'
    | 'started_at'
    | 'completed_at'
  >
>

export type GroupFields = Partial<Pick<RolloutGroupRecord, 'pause_reason' | 'error_message' | 'current_component_index' | 'started_at' | 'completed_at'>>

export interface StatusMoveOptions<F> {
  /** The version the caller read; when given and the row has moved on, ConflictError. */
  expectedVersion?: number
  now: Date
  fields?: F
}

const TERMINAL_ROLLOUT: readonly RolloutStatus[] = ['completed', 'failed', 'cancelled', 'rolled_back']
const TERMINAL_GROUP: readonly RolloutGroupStatus[] = ['completed', 'partial', 'failed', 'cancelled', 'rolled_back']

export function isTerminalRollout(status: RolloutStatus): boolean {
  return TERMINAL_ROLLOUT.includes(status)
}

export function isTerminalGroup(status: RolloutGroupStatus): boolean {
  return TERMINAL_GROUP.includes(status)
}

/**
 * Moves a rollout to `to` through the spec's table (ConflictError for any other move, a move to
 * the same status included), optimistic-locked on `version`. Sets `started_at` on the first
 * move to running, `completed_at` on a terminal status, and clears `pause_reason` on a move to
 * running unless `fields` says otherwise.
 */
export async function updateRolloutStatus(db: Queryable, id: string, to: RolloutStatus, options: StatusMoveOptions<RolloutFields>): Promise<RolloutRecord> {
  const current = await requireRollout(db, id)
  checkVersion('rollout', current, options.expectedVersion)
  if (!canMoveRollout(current.status, to)) throw refusedMove('rollout', current.id, current.status, to, ROLLOUT_TRANSITIONS[current.status])
  const changes: Record<string, unknown> = { status: to }
  if (to === 'running') {
    if (current.started_at === null) changes.started_at = options.now
    changes.pause_reason = null
  }
  if (isTerminalRollout(to)) changes.completed_at = options.now
  Object.assign(changes, defined(options.fields))
  return writeRollout(db, current, changes, options.now, to)
}

/** Sets progress columns without a status move (counters, current batch, awaiting), optimistic-locked. */
export async function updateRolloutFields(db: Queryable, id: string, fields: RolloutFields, options: { expectedVersion?: number; now: Date }): Promise<RolloutRecord> {
  const current = await requireRollout(db, id)
  checkVersion('rollout', current, options.expectedVersion)
  return writeRollout(db, current, defined(fields), options.now)
}

/**
 * Moves a group through its table (src/rollouts/states.ts, docs/rollouts.md), as
 * `updateRolloutStatus` does a rollout.
 */
export async function updateGroupStatus(db: Queryable, id: string, to: RolloutGroupStatus, options: StatusMoveOptions<GroupFields>): Promise<RolloutGroupRecord> {
  const current = await requireRolloutGroup(db, id)
  checkVersion('rollout group', current, options.expectedVersion)
  if (!canMoveGroup(current.status, to)) throw refusedMove('rollout group', current.id, current.status, to, ROLLOUT_GROUP_TRANSITIONS[current.status])
  const changes: Record<string, unknown> = { status: to }
  if (to === 'running') {
    if (current.started_at === null) changes.started_at = options.now
    changes.pause_reason = null
  }
  if (isTerminalGroup(to)) changes.completed_at = options.now
  Object.assign(changes, defined(options.fields))
  return writeGroup(db, current, changes, options.now, to)
}

export async function updateGroupFields(db: Queryable, id: string, fields: GroupFields, options: { expectedVersion?: number; now: Date }): Promise<RolloutGroupRecord> {
  const current = await requireRolloutGroup(db, id)
  checkVersion('rollout group', current, options.expectedVersion)
  return writeGroup(db, current, defined(fields), options.now)
}

function checkVersion(what: string, current: { id: string; version: number }, expected: number | undefined): void {
  if (expected !== undefined && expected !== current.version) {
    throw new ConflictError(`${what} ${current.id} was changed concurrently`, `expected version ${expected}, found ${current.version}; read it again and retry`)
  }
}

function refusedMove(what: string, id: string, from: string, to: string, allowed: readonly string[]): ConflictError {
  return new ConflictError(`${what} ${id} is ${from}; it cannot become ${to}`, allowed.length > 0 ? `from ${from} it can only become: ${allowed.join(', ')}` : `${from} is final`)
}

async function writeRollout(db: Queryable, current: RolloutRecord, changes: Record<string, unknown>, now: Date, to?: RolloutStatus): Promise<RolloutRecord> {
  const version = current.version + 1
  await versionedUpdate(db, 'rollouts', 'rollout', current, { ...changes, version, updated_at: now }, async () => {
    const fresh = await getRollout(db, current.id)
    return fresh && to !== undefined && !canMoveRollout(fresh.status, to) ? refusedMove('rollout', fresh.id, fresh.status, to, ROLLOUT_TRANSITIONS[fresh.status]) : undefined
  })
  return rolloutFromRow({ ...toRow(current), ...changes, version, updated_at: now })
}

async function writeGroup(db: Queryable, current: RolloutGroupRecord, changes: Record<string, unknown>, now: Date, to?: RolloutGroupStatus): Promise<RolloutGroupRecord> {
  const version = current.version + 1
  await versionedUpdate(db, 'rollout_groups', 'rollout group', current, { ...changes, version, updated_at: now }, async () => {
    const fresh = await getRolloutGroup(db, current.id)
    return fresh && to !== undefined && !canMoveGroup(fresh.status, to) ? refusedMove('rollout group', fresh.id, fresh.status, to, ROLLOUT_GROUP_TRANSITIONS[fresh.status]) : undefined
  })
  return rolloutGroupFromRow({ ...toRow(current), ...changes, version, updated_at: now })
}

/**
 * `UPDATE … WHERE id = ? AND version = ?`: no row means another writer moved it first. The
 * loser is told what it lost against (the refused move when the row's new status no longer
 * allows it, otherwise a concurrent change).
 */
async function versionedUpdate(
  db: Queryable,
  table: string,
  what: string,
  current: { id: string; version: number },
  changes: Record<string, unknown>,
  explainLoss: () => Promise<ConflictError | undefined>,
): Promise<void> {
  let updated: number
  try {
    updated = affectedRows(await db(table).where({ id: current.id, version: current.version }).update(changes))
  } catch (err) {
    if (isConcurrentWriteFailure(err)) throw new ConflictError(`${what} ${current.id} was changed concurrently`, 'read it again and retry')
    throw err
  }
  if (updated === 1) return
  throw (await explainLoss()) ?? new ConflictError(`${what} ${current.id} was changed concurrently`, `version ${current.version} is no longer current; read it again and retry`)
}

/** Without the keys whose value is undefined: an absent field is left as it is (null clears it). */
function defined(fields: object | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields ?? {}).filter(([, value]) => value !== undefined))
}

/** A record back to row shape for `…FromRow` (json columns stay objects: fromJson passes them through). */
function toRow(record: object): Row {
  return { ...(record as Row) }
}
