/**
 * Health state transitions per second through the state machine (read, table check, versioned
 * update, outbox event — one transaction each) against a bare single-row update in a
 * transaction on the same database, same run. Aim: >= 50% of the bare rate.
 */
import crypto from 'node:crypto'
import { applyHealthUpdate } from '../src/nodes/health-state-machine.js'
import { insertNode } from '../src/nodes/node-store.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, throughput, type Bench, type BenchFigure } from './lib.js'

const NODES = 100

export const benchStateMachine: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      const now = new Date()
      const userId = crypto.randomUUID()
      await db('users').insert({ id: userId, is_admin: false, created_at: now, updated_at: now })
      const ids: string[] = []
      for (let i = 0; i < NODES; i++) {
        const subscriptionId = crypto.randomUUID()
        await db('subscriptions').insert({
          id: subscriptionId,
          user_id: userId,
          chain_profile_id: 'devnet',
          node_type: 'full',
          duration: '1m',
          provider: 'local',
          region: 'local',
          instance_type: 'process',
          status: 'active',
          expires_at: now,
          created_at: now,
          updated_at: now,
        })
        const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' })
        await db('nodes').where({ id: node.id }).update({ state: 'healthy' })
        ids.push(node.id)
      }
      const ms = 2_000 * ctx.scale

      let i = 0
      const bare = await throughput(
        () =>
          db.transaction(async (trx) => {
            const id = ids[i++ % NODES]!
            await trx('nodes').where({ id }).update({ application_health: i % 2 ? 'ok' : 'degraded', updated_at: new Date() })
          }),
        { ms },
      )

      let j = 0
      const values = ['ok', 'degraded'] as const
      const machine = await throughput(
        () =>
          db.transaction(async (trx) => {
            const n = j++
            await applyHealthUpdate(trx, {
              nodeId: ids[n % NODES]!,
              change: { writer: 'policy_evaluation', application_health: values[Math.floor(n / NODES) % 2]! },
            })
          }),
        { ms },
      )
      ctx.log(`state machine ${dialect}: ${machine.toFixed(0)}/s vs bare update ${bare.toFixed(0)}/s`)
      figures.push(
        figure({
          name: `health transitions through the state machine (${dialect})`,
          baseline: `bare single-row update in a transaction (${dialect})`,
          unit: 'transitions/s',
          value: machine,
          baselineValue: bare,
          aim: '>= 0.5',
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}
