/**
 * Health state transitions per second through the state machine (read, table check, versioned
 * update, outbox event — one transaction each) against a bare single-row update in a
 * transaction on the same database, same run. Aim: >= 50% of the bare rate.
 */
import { applyHealthUpdate } from '../src/nodes/health-state-machine.js'
import { findNode, type NodeRecord } from '../src/nodes/node-store.js'
import { insertTestNode, setNodeState } from '../test/helpers/fixtures.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, interleaved, type Bench, type BenchFigure } from './lib.js'

const NODES = 100

export const benchStateMachine: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      const ids: string[] = []
      for (let i = 0; i < NODES; i++) {
        const node = await insertTestNode(db)
        await setNodeState(db, node.id, 'healthy')
        ids.push(node.id)
      }
      // Every call is a real change: the opposite of what the node has now.
      const change = (nodeId: string) => ({
        writer: 'policy_evaluation' as const,
        application_health: nodes.get(nodeId)?.application_health === 'ok' ? ('degraded' as const) : ('ok' as const),
      })
      // As an evaluation cycle does it: the fleet was read in one query, each node's copy is passed.
      const nodes = new Map<string, NodeRecord | undefined>()
      for (const id of ids) nodes.set(id, await findNode(db, id))
      let i = 0
      let j = 0
      let k = 0

      const { bare, machine, withRead } = await interleaved(
        {
          bare: () =>
            db.transaction(async (trx) => {
              const id = ids[i++ % NODES]!
              // An unindexed column, like application_health, and one the state machine leaves alone.
              await trx('nodes').where({ id }).update({ consecutive_failures: i % 2, updated_at: new Date() })
            }),
          machine: () =>
            db.transaction(async (trx) => {
              const nodeId = ids[j++ % NODES]!
              const result = await applyHealthUpdate(trx, { nodeId, current: nodes.get(nodeId), change: change(nodeId) })
              nodes.set(nodeId, result.node)
            }),
          // A caller with no copy: the state machine reads the row itself first.
          withRead: () =>
            db.transaction(async (trx) => {
              const nodeId = ids[k++ % NODES]!
              const result = await applyHealthUpdate(trx, { nodeId, change: change(nodeId) })
              nodes.set(nodeId, result.node)
            }),
        },
        { msPerRound: 400 * ctx.scale },
      )
      ctx.log(`state machine ${dialect}: ${machine.toFixed(0)}/s (with its own read ${withRead.toFixed(0)}/s) vs bare update ${bare.toFixed(0)}/s`)
      figures.push(
        figure({
          name: `health transitions through the state machine, node already read (${dialect})`,
          baseline: `bare single-row update in a transaction (${dialect})`,
          unit: 'transitions/s',
          value: machine,
          baselineValue: bare,
          aim: '>= 0.5',
        }),
        figure({
          name: `health transitions through the state machine, reading the node first (${dialect})`,
          baseline: `bare single-row update in a transaction (${dialect})`,
          unit: 'transitions/s',
          value: withRead,
          baselineValue: bare,
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}
