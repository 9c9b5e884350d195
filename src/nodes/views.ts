/**
 * The API's view of a node: the spec's public fields, the display state, and the versions from
 * `node_config_state`. The internal columns (provider, instance_type, host_id, host_ip, region)
 * are never selected, so no caller, admin included, can receive them (spec: "internal only,
 * hidden from users"; decision in docs/http.md, Nodes).
 */
import type { Knex } from 'knex'
import type { Visibility } from '../auth/scopes.js'
import { toDate, toDateOrNull } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { displayState, type ApplicationHealth, type DisplayState, type NodeState, type SyncStatus } from './states.js'

export interface NodeView {
  id: string
  subscription_id: string
  chain_profile_id: string
  node_type: string
  state: NodeState
  sync_status: SyncStatus
  application_health: ApplicationHealth
  display_state: DisplayState
  binary_version: string | null
  config_version: string | null
  last_heartbeat: string | null
  last_migration_triggered_at: string | null
  created_at: string
  updated_at: string
}


export interface NodeFilters {
  subscriptionId?: string | undefined
  state?: NodeState | undefined
  userId?: string | undefined
}

/** The sort and tie-break columns of node lists (newest first). */
export const NODE_LIST_ORDER = { sortColumn: 'n.created_at', idColumn: 'n.id' } as const

export const NODE_VIEW_COLUMNS = [
  'n.id',
  'n.subscription_id',
  'n.chain_profile_id',
  'n.node_type',
  'n.state',
  'n.sync_status',
  'n.application_health',
  'n.last_heartbeat',
  'n.last_migration_triggered_at',
  'n.created_at',
  'n.updated_at',
  'c.binary_version',
  'c.config_version',
] as const

/**
 * Nodes visible to the caller and matching the filters; filters only (no select, order or
 * limit), as `paginateKeyset` wants it.
 */
export function nodeViewQuery(db: Queryable, visibility: Visibility, filters: NodeFilters = {}): Knex.QueryBuilder {
  const query = db('nodes as n').leftJoin('node_config_state as c', 'c.node_id', 'n.id')
  const userIds = new Set<string>()
  if (visibility.kind === 'owner') userIds.add(visibility.userId)
  if (filters.userId !== undefined) userIds.add(filters.userId)
  if (userIds.size > 0) {
    query.join('subscriptions as s', 's.id', 'n.subscription_id')
    for (const userId of userIds) query.where('s.user_id', userId)
  }
  if (filters.subscriptionId !== undefined) query.where('n.subscription_id', filters.subscriptionId)
  if (filters.state !== undefined) query.where('n.state', filters.state)
  return query
}

/** One node as the caller may see it; undefined when it does not exist or is not theirs. */
export async function findNodeView(db: Queryable, visibility: Visibility, id: string): Promise<NodeView | undefined> {
  const row = (await nodeViewQuery(db, visibility)
    .where('n.id', id)
    .select(...NODE_VIEW_COLUMNS)
    .first()) as Record<string, unknown> | undefined
  return row ? nodeViewFromRow(row) : undefined
}

const iso = (value: unknown): string | null => toDateOrNull(value)?.toISOString() ?? null
const textOrNull = (value: unknown): string | null => (value === null || value === undefined ? null : String(value))

/** A row selected with NODE_VIEW_COLUMNS (unqualified names, as the driver returns them). */
export function nodeViewFromRow(row: Record<string, unknown>): NodeView {
  const state = row.state as NodeState
  const sync_status = row.sync_status as SyncStatus
  const application_health = row.application_health as ApplicationHealth
  return {
    id: String(row.id),
    subscription_id: String(row.subscription_id),
    chain_profile_id: String(row.chain_profile_id),
    node_type: String(row.node_type),
    state,
    sync_status,
    application_health,
    display_state: displayState({ state, sync_status, application_health }),
    binary_version: textOrNull(row.binary_version),
    config_version: textOrNull(row.config_version),
    last_heartbeat: iso(row.last_heartbeat),
    last_migration_triggered_at: iso(row.last_migration_triggered_at),
    created_at: toDate(row.created_at).toISOString(),
    updated_at: toDate(row.updated_at).toISOString(),
  }
}
