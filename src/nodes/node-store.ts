/** Node rows: one exported function per database operation, caller owns the transaction. */
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import { lockRow, toDate, toDateOrNull } from '../db/dialect.js'
import { openFirstInterval } from '../uptime/state-log.js'
import { INITIAL_NODE_STATE, type ApplicationHealth, type NodeState, type SyncStatus } from './states.js'

export interface NodeRecord {
  id: string
  subscription_id: string
  chain_profile_id: string
  node_type: string
  state: NodeState
  sync_status: SyncStatus
  application_health: ApplicationHealth
  provider: string | null
  instance_type: string | null
  host_id: string | null
  host_ip: string | null
  region: string | null
  last_heartbeat: Date | null
  last_migration_triggered_at: Date | null
  consecutive_failures: number
  state_changed_at: Date
  version: number
  created_at: Date
  updated_at: Date
}

type NodeRow = Record<keyof NodeRecord, unknown>

export function nodeFromRow(row: NodeRow): NodeRecord {
  return {
    id: String(row.id),
    subscription_id: String(row.subscription_id),
    chain_profile_id: String(row.chain_profile_id),
    node_type: String(row.node_type),
    state: row.state as NodeState,
    sync_status: row.sync_status as SyncStatus,
    application_health: row.application_health as ApplicationHealth,
    provider: (row.provider as string | null) ?? null,
    instance_type: (row.instance_type as string | null) ?? null,
    host_id: (row.host_id as string | null) ?? null,
    host_ip: (row.host_ip as string | null) ?? null,
    region: (row.region as string | null) ?? null,
    last_heartbeat: toDateOrNull(row.last_heartbeat),
    last_migration_triggered_at: toDateOrNull(row.last_migration_triggered_at),
    consecutive_failures: Number(row.consecutive_failures),
    state_changed_at: toDate(row.state_changed_at),
    version: Number(row.version),
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

export async function findNode(db: Queryable, id: string): Promise<NodeRecord | undefined> {
  const row = await db('nodes').where({ id }).first()
  return row ? nodeFromRow(row as NodeRow) : undefined
}

/**
 * The node, its row locked until the transaction ends (Postgres; SQLite's write transactions are
 * exclusive already). A read-modify-write of the node's health through it waits for a concurrent
 * writer instead of losing the optimistic version check to it.
 */
export async function findNodeForUpdate(trx: Queryable, id: string): Promise<NodeRecord | undefined> {
  await lockRow(trx, trx('nodes').where({ id }).first('id'))
  return findNode(trx, id)
}

/** The nodes of `ids` that exist, in no particular order. */
export async function findNodes(db: Queryable, ids: readonly string[]): Promise<NodeRecord[]> {
  const rows = (await db('nodes').whereIn('id', ids)) as NodeRow[]
  return rows.map(nodeFromRow)
}

export interface NewNode {
  id?: string
  subscription_id: string
  chain_profile_id: string
  node_type: string
  provider?: string | null
  instance_type?: string | null
  region?: string | null
}

/** Inserts a node in its initial state, `provisioning`, with unknown sync and health. */
export async function insertNode(db: Queryable, node: NewNode, now: Date = new Date()): Promise<NodeRecord> {
  const row = {
    id: node.id ?? crypto.randomUUID(),
    subscription_id: node.subscription_id,
    chain_profile_id: node.chain_profile_id,
    node_type: node.node_type,
    state: INITIAL_NODE_STATE,
    sync_status: 'unknown',
    application_health: 'unknown',
    provider: node.provider ?? null,
    instance_type: node.instance_type ?? null,
    region: node.region ?? null,
    consecutive_failures: 0,
    state_changed_at: now,
    version: 1,
    created_at: now,
    updated_at: now,
  }
  await db('nodes').insert(row)
  await openFirstInterval(db, { nodeId: row.id, state: INITIAL_NODE_STATE, at: now, writer: 'node_created' })
  return nodeFromRow({ ...row, host_id: null, host_ip: null, last_heartbeat: null, last_migration_triggered_at: null } as NodeRow)
}
