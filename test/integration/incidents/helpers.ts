/** Shared pieces of the incident tests: nodes with an owner, health changes, reading incidents back. */
import type { Db, Queryable } from '../../../src/db/knex.js'
import { fromJson } from '../../../src/db/dialect.js'
import { incidentFromRow, INCIDENT_COLUMNS, type Incident } from '../../../src/health/incident-store.js'
import { applyHealthUpdate, forceNodeState, type HealthChange } from '../../../src/nodes/health-state-machine.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import type { NodeState } from '../../../src/nodes/states.js'
import { insertSubscription, insertUser } from '../../helpers/fixtures.js'

export const T0 = new Date('2026-05-04T08:00:00.000Z')
export const at = (ms: number): Date => new Date(T0.getTime() + ms)
export const MINUTE = 60_000

export interface OwnedNode {
  id: string
  subscriptionId: string
  userId: string
}

/** A node of a fresh user in `state` with the given dimensions (setup bypasses the state machine). */
export async function ownedNode(db: Queryable, state: NodeState, extra: Record<string, unknown> = {}, userId?: string): Promise<OwnedNode> {
  const owner = userId ?? (await insertUser(db, T0))
  const subscriptionId = await insertSubscription(db, owner, T0)
  const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, T0)
  await db('nodes')
    .where({ id: node.id })
    .update({ state, ...extra })
  return { id: node.id, subscriptionId, userId: owner }
}

export function change(db: Db, nodeId: string, healthChange: HealthChange, now: Date, reason?: string) {
  return db.transaction((trx) => applyHealthUpdate(trx, { nodeId, change: healthChange, now, ...(reason ? { reason } : {}) }))
}

export function force(db: Db, nodeId: string, state: NodeState, reason: string, now: Date) {
  return db.transaction((trx) => forceNodeState(trx, { nodeId, state, reason, now }))
}

export async function incidentsOf(db: Queryable, nodeId: string): Promise<Incident[]> {
  const rows = (await db('incidents').where({ node_id: nodeId }).orderBy([{ column: 'created_at' }, { column: 'id' }]).select(...INCIDENT_COLUMNS)) as Array<Record<string, unknown>>
  return rows.map(incidentFromRow)
}

export interface StoredNotification {
  kind: string
  title: string
  body: string
  data: Record<string, unknown>
}

export async function notificationsOf(db: Queryable, userId: string): Promise<StoredNotification[]> {
  const rows = (await db('notifications').where({ user_id: userId }).orderBy([{ column: 'created_at' }, { column: 'id' }]).select('kind', 'title', 'body', 'data')) as Array<Record<string, unknown>>
  return rows.map((r) => ({ kind: String(r.kind), title: String(r.title), body: String(r.body), data: fromJson<Record<string, unknown>>(r.data) }))
}
