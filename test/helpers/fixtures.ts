/** Minimal valid rows for tests that need a node and what it belongs to. */
import crypto from 'node:crypto'
import type { Queryable } from '../../src/db/knex.js'
import { insertNode, type NodeRecord } from '../../src/nodes/node-store.js'

export async function insertUser(db: Queryable, now = new Date()): Promise<string> {
  const id = crypto.randomUUID()
  await db('users').insert({ id, email: `${id}@example.test`, is_admin: false, created_at: now, updated_at: now })
  return id
}

export async function insertSubscription(db: Queryable, userId: string, now = new Date(), nodeType = 'full'): Promise<string> {
  return insertSubscriptionOf(db, userId, { now, nodeType })
}

/** An active one-month subscription on the local provider, of `chain` (default devnet). */
export async function insertSubscriptionOf(
  db: Queryable,
  userId: string,
  options: { chain?: string; nodeType?: string; instanceType?: string; now?: Date } = {},
): Promise<string> {
  const id = crypto.randomUUID()
  const now = options.now ?? new Date()
  await db('subscriptions').insert({
    id,
    user_id: userId,
    chain_profile_id: options.chain ?? 'devnet',
    node_type: options.nodeType ?? 'full',
    duration: '1m',
    provider: 'local',
    region: 'local',
    instance_type: options.instanceType ?? 'process',
    status: 'active',
    expires_at: new Date(now.getTime() + 30 * 86_400_000),
    created_at: now,
    updated_at: now,
  })
  return id
}

export async function insertTestNode(db: Queryable, now = new Date()): Promise<NodeRecord> {
  const userId = await insertUser(db, now)
  const subscriptionId = await insertSubscription(db, userId, now)
  return insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, now)
}

/** Puts a node straight into `state` (test setup only: bypasses the state machine). */
export async function setNodeState(db: Queryable, nodeId: string, state: string): Promise<void> {
  await db('nodes').where({ id: nodeId }).update({ state })
}
