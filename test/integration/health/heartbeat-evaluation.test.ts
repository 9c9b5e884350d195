/**
 * Heartbeat evaluation with a moved clock, on both databases: the spec's timeout -> counter ->
 * `down` at exactly 3, recovery during the down grace, syncing -> healthy on synced, maintenance
 * and other states skipped, and evaluators that overlap never counting a timeout twice.
 */
import { expect, it } from 'vitest'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { scheduleHealthEvaluation } from '../../../src/health/evaluator.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { applyHealthUpdate, type StateWriter } from '../../../src/nodes/health-state-machine.js'
import type { NodeState } from '../../../src/nodes/states.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { at, freshDatabases, healthEvents, logger, nodeNow, nodeWith, SECOND, SETTINGS } from './support.js'

// The two dialects' cases at the same time, each on databases of its own: most of the time here is
// Postgres making and dropping a database per case.
describeEachDialectConcurrently('heartbeat evaluation on %s', (dialect) => {
  const { database, current } = freshDatabases(dialect)
  const cycle = (db: Db, ms: number) => evaluateHeartbeats(db, { now: at(ms), heartbeatTimeoutMs: SETTINGS.heartbeatTimeoutMs, intervalMs: SETTINGS.intervalMs, logger })

  it('counts one failure per cycle after the 60 s timeout and moves the node down at exactly 3', async () => {
    const db = await database()
    const stale = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })
    const fresh = await nodeWith(db, { state: 'healthy', heartbeatAt: -50 * SECOND })
    const never = await nodeWith(db, { state: 'degraded', heartbeatAt: null })

    expect((await cycle(db, 0)).counted).toBe(2)
    expect(await nodeNow(db, stale)).toMatchObject({ state: 'healthy', consecutive_failures: 1 })
    expect(await nodeNow(db, never)).toMatchObject({ state: 'degraded', consecutive_failures: 1 })
    expect(await nodeNow(db, fresh)).toMatchObject({ state: 'healthy', consecutive_failures: 0 })

    // A second cycle right after the first (another evaluator, or a retry) counts nothing.
    expect((await cycle(db, 5 * SECOND)).counted).toBe(0)
    expect((await nodeNow(db, stale)).consecutive_failures).toBe(1)

    // The fresh node's heartbeat is now older than the timeout as well.
    await cycle(db, 15 * SECOND)
    expect(await nodeNow(db, stale)).toMatchObject({ state: 'healthy', consecutive_failures: 2 })
    expect(await healthEvents(db, stale)).toEqual([])

    const third = await cycle(db, 30 * SECOND)
    expect(third.moves).toEqual(expect.arrayContaining([{ node_id: stale, from: 'healthy', to: 'down' }, { node_id: never, from: 'degraded', to: 'down' }]))
    // Every state change starts the counter afresh.
    expect(await nodeNow(db, stale)).toMatchObject({ state: 'down', consecutive_failures: 0 })
    expect(await nodeNow(db, fresh)).toMatchObject({ state: 'healthy', consecutive_failures: 2 })
    const events = await healthEvents(db, stale)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({ writer: 'heartbeat_evaluation', dimension: 'state', from: 'healthy', to: 'down', reason: '3 consecutive heartbeat timeouts' })

    // Down stays down: no further moves or events while the heartbeats stay away.
    await cycle(db, 45 * SECOND)
    expect((await nodeNow(db, stale)).state).toBe('down')
    expect(await healthEvents(db, stale)).toHaveLength(1)
  })

  it('moves a fleet-wide outage down in one cycle, over several transactions, one health event per node', async () => {
    const db = await database()
    // More than one transaction's worth of moves (200 each), made 50 at a time (one after
    // another, they are some 2,000 round trips end to end).
    const ids: string[] = []
    for (let i = 0; i < 450; i += 50) {
      ids.push(...(await Promise.all(Array.from({ length: 50 }, () => nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })))))
    }
    const live = await nodeWith(db, { state: 'healthy', heartbeatAt: 40 * SECOND })
    await cycle(db, 0)
    await cycle(db, 15 * SECOND)
    const third = await cycle(db, 30 * SECOND)
    expect(third.moves).toHaveLength(450)
    expect(third.conflicts).toBe(0)
    expect(new Set(third.moves.map((m) => m.node_id))).toEqual(new Set(ids))
    const states = (await db('nodes').whereIn('id', ids).pluck('state')) as string[]
    expect(new Set(states)).toEqual(new Set(['down']))
    expect((await nodeNow(db, live)).state).toBe('healthy')
    const events = (await db('outbox').whereLike('subject', 'events.node.%.health_changed').count({ n: '*' }).first()) as { n: number | string }
    expect(Number(events.n)).toBe(450)
    const open = (await db('uptime_state_log').whereIn('node_id', ids).whereNull('exited_at').pluck('state')) as string[]
    expect(open).toHaveLength(450)
    expect(new Set(open)).toEqual(new Set(['down']))
  })

  it('a heartbeat resets the counter; one during the down grace brings the node back to healthy', async () => {
    const db = await database()
    const blip = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })
    const down = await nodeWith(db, { state: 'syncing', heartbeatAt: -61 * SECOND, syncStatus: 'syncing' })
    await cycle(db, 0)
    await cycle(db, 15 * SECOND)
    expect((await nodeNow(db, blip)).consecutive_failures).toBe(2)

    await db('nodes').where({ id: blip }).update({ last_heartbeat: at(20 * SECOND) })
    await cycle(db, 30 * SECOND)
    expect(await nodeNow(db, blip)).toMatchObject({ state: 'healthy', consecutive_failures: 0 })
    expect(await healthEvents(db, blip)).toEqual([])
    expect(await nodeNow(db, down)).toMatchObject({ state: 'down', consecutive_failures: 0 })

    // The agent comes back before the migration starts.
    await db('nodes').where({ id: down }).update({ last_heartbeat: at(40 * SECOND) })
    const back = await cycle(db, 45 * SECOND)
    expect(back.moves).toEqual([{ node_id: down, from: 'down', to: 'healthy' }])
    expect(await nodeNow(db, down)).toMatchObject({ state: 'healthy', consecutive_failures: 0 })
    expect((await healthEvents(db, down)).map((e) => [e.from, e.to, e.reason])).toEqual([
      ['syncing', 'down', '3 consecutive heartbeat timeouts'],
      ['down', 'healthy', 'heartbeat received while down'],
    ])
  })

  it('moves syncing nodes to healthy when their agent reports synced, and leaves syncing ones', async () => {
    const db = await database()
    const synced = await nodeWith(db, { state: 'syncing', heartbeatAt: -5 * SECOND, syncStatus: 'synced' })
    const catching = await nodeWith(db, { state: 'syncing', heartbeatAt: -5 * SECOND, syncStatus: 'syncing' })
    const result = await cycle(db, 0)
    expect(result.moves).toEqual([{ node_id: synced, from: 'syncing', to: 'healthy' }])
    expect((await healthEvents(db, synced))[0]).toMatchObject({ writer: 'heartbeat_evaluation', reason: 'agent reports synced' })
    expect((await nodeNow(db, catching)).state).toBe('syncing')
    expect(await healthEvents(db, catching)).toEqual([])
  })

  it('skips maintenance, provisioning, terminating and terminal nodes, and a node that just entered its state', async () => {
    const db = await database()
    const skipped = await Promise.all(
      ['maintenance', 'provisioning', 'terminating', 'terminated', 'failed'].map((state) => nodeWith(db, { state, heartbeatAt: -10 * 60 * SECOND })),
    )
    // Back from a migration 30 s ago: its last heartbeat is the old host's.
    const migrated = await nodeWith(db, { state: 'syncing', heartbeatAt: -10 * 60 * SECOND, stateSince: -30 * SECOND, syncStatus: 'syncing' })
    for (let i = 0; i < 4; i++) await cycle(db, i * 15 * SECOND)
    for (const [i, id] of skipped.entries()) {
      expect(await nodeNow(db, id), `node ${i}`).toMatchObject({ consecutive_failures: 0 })
      expect(await healthEvents(db, id)).toEqual([])
    }
    expect((await nodeNow(db, skipped[0] as string)).state).toBe('maintenance')
    // Counted only once more than 60 s have passed since it entered syncing: the cycle at +45 s.
    expect(await nodeNow(db, migrated)).toMatchObject({ state: 'syncing', consecutive_failures: 1 })
  })

  it('a node back from a migration starts with a clean counter and gets a full timeout before it can go down again', async () => {
    const db = await database()
    const move = (id: string, state: NodeState, ms: number, writer: StateWriter = 'migration') =>
      db.transaction((trx) => applyHealthUpdate(trx, { nodeId: id, change: { writer, state }, reason: 'test', now: at(ms) }))
    const node = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND })
    for (const ms of [0, 15 * SECOND, 30 * SECOND]) await cycle(db, ms)
    expect(await nodeNow(db, node)).toMatchObject({ state: 'down', consecutive_failures: 0 })

    // Even a counter left at 3 (written before this fix, or by hand) is cleared by the next move.
    await db('nodes').where({ id: node }).update({ consecutive_failures: 3 })
    await move(node, 'maintenance', 2 * 60 * SECOND)
    expect(await nodeNow(db, node)).toMatchObject({ state: 'maintenance', consecutive_failures: 0 })
    // The migration sets syncing at +10 min; the new agent's last heartbeat is 90 s old by then.
    const back = 10 * 60 * SECOND
    await db('nodes').where({ id: node }).update({ last_heartbeat: at(back - 90 * SECOND) })
    await move(node, 'syncing', back)

    // The full timeout since it entered syncing: no count, no move.
    for (const ms of [15, 30, 45, 60].map((s) => back + s * SECOND)) {
      const result = await cycle(db, ms)
      expect(result.moves, `cycle at +${(ms - back) / 1000} s`).toEqual([])
    }
    expect(await nodeNow(db, node)).toMatchObject({ state: 'syncing', consecutive_failures: 0 })
    // Then three timeouts, as for any node: down at +90 s.
    await cycle(db, back + 75 * SECOND)
    expect(await nodeNow(db, node)).toMatchObject({ state: 'syncing', consecutive_failures: 1 })
    await cycle(db, back + 90 * SECOND)
    expect(await nodeNow(db, node)).toMatchObject({ state: 'syncing', consecutive_failures: 2 })
    const third = await cycle(db, back + 105 * SECOND)
    expect(third.moves).toEqual([{ node_id: node, from: 'syncing', to: 'down' }])
  })

  it('does not move a node down on a counter from before it entered its state', async () => {
    const db = await database()
    // A counter that should not be there (set bypassing the state machine), 30 s into syncing.
    const node = await nodeWith(db, { state: 'syncing', heartbeatAt: -10 * 60 * SECOND, stateSince: -30 * SECOND, syncStatus: 'syncing', consecutiveFailures: 3 })
    expect((await cycle(db, 0)).moves).toEqual([])
    expect((await cycle(db, 15 * SECOND)).moves).toEqual([])
    expect(await nodeNow(db, node)).toMatchObject({ state: 'syncing' })
    // Past the timeout since it entered syncing, the counter counts.
    expect((await cycle(db, 31 * SECOND)).moves).toEqual([{ node_id: node, from: 'syncing', to: 'down' }])
  })

  it('two evaluators: the lease runs one cycle at a time, and overlapping cycles count a timeout once and move the node once', async () => {
    const db = await database()
    const other = current()?.connect() as Db
    // On SQLite both pools are in this process: a write that finds the other pool's transaction
    // holding the lock waits busy_timeout with the event loop blocked, so the holder cannot commit
    // and the wait always ends in SQLITE_BUSY (the conflict this case expects), never in the lock.
    // The default 10 s (for other processes) is only waiting.
    if (dialect === 'sqlite') for (const handle of [db, other]) await handle.raw('PRAGMA busy_timeout = 100')
    const node = await nodeWith(db, { state: 'healthy', heartbeatAt: -61 * SECOND, consecutiveFailures: 2 })
    const catalogue = staticChainSource(await loadChainCatalogue(defaultConfigDir()))

    const overlapping = await Promise.all([cycle(db, 0), cycle(other, 0)])
    expect(overlapping.map((r) => r.counted).sort()).toEqual([0, 1])
    expect(await nodeNow(db, node)).toMatchObject({ state: 'down', consecutive_failures: 0 })
    expect(await healthEvents(db, node)).toHaveLength(1)

    const jobs = [db, other].map((handle) =>
      scheduleHealthEvaluation({ ...SETTINGS, intervalMs: 6 * 3_600_000 }, { db: handle, logger, chains: catalogue, now: () => at(15 * SECOND) }),
    )
    try {
      const ran = await Promise.all(jobs.map((job) => job.tick()))
      expect(ran.filter(Boolean)).toHaveLength(1)
    } finally {
      await Promise.all(jobs.map((job) => job.stop()))
    }
  })
})
