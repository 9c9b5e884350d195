/** A fleet of healthy nodes (one subscription each, one user) for the benchmarks that need one. */
import crypto from 'node:crypto'
import type { Db } from '../src/db/knex.js'
import { uuidv7 } from '../src/db/ids.js'

/** knex writes a multi-row insert on SQLite as a compound SELECT, limited to 500 terms. */
export const INSERT_CHUNK = 400

export async function insertFleet(db: Db, count: number, now: Date = new Date()): Promise<string[]> {
  const userId = crypto.randomUUID()
  await db('users').insert({ id: userId, email: `${userId}@bench.test`, is_admin: false, created_at: now, updated_at: now })
  const ids: string[] = []
  for (let start = 0; start < count; start += INSERT_CHUNK) {
    const subscriptions: Record<string, unknown>[] = []
    const nodes: Record<string, unknown>[] = []
    for (let i = start; i < Math.min(count, start + INSERT_CHUNK); i++) {
      const subscriptionId = uuidv7()
      const nodeId = uuidv7()
      subscriptions.push({
        id: subscriptionId, user_id: userId, chain_profile_id: 'devnet', node_type: 'full', duration: '1m', provider: 'local', region: 'local',
        instance_type: 'local.small', status: 'active', expires_at: new Date(now.getTime() + 30 * 86_400_000), created_at: now, updated_at: now,
      })
      nodes.push({
        id: nodeId, subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full', state: 'healthy', sync_status: 'synced',
        application_health: 'ok', consecutive_failures: 0, state_changed_at: now, version: 1, created_at: now, updated_at: now,
      })
      ids.push(nodeId)
    }
    await db.transaction(async (trx) => {
      await trx('subscriptions').insert(subscriptions)
      await trx('nodes').insert(nodes)
    })
  }
  return ids
}
