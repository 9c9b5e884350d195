/**
 * Policy evaluation against the devnet profile's health_policy (rpc_up, peer_count, block_lag;
 * measured against the fleet's head, as for a real chain, unless a test says otherwise)
 * on both databases: agents' reports turn into application_health through the health state
 * machine, one event per change, nothing for nodes in maintenance.
 */
import { beforeAll, describe, expect, it } from 'vitest'
import { defaultConfigDir, loadChainCatalogue, type ChainCatalogue } from '../../../src/config/chains.js'
import { toJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { runHealthEvaluationCycle } from '../../../src/health/evaluator.js'
import { evaluatePolicies } from '../../../src/health/policy-evaluation.js'
import { DIALECTS } from '../../helpers/db.js'
import { at, freshDatabases, healthEvents, logger, nodeNow, nodeWith, SECOND, SETTINGS } from './support.js'

let catalogue: ChainCatalogue
/** The same catalogue with devnet's block_lag measured against the fleet's head, as a real chain's is. */
let fleetCatalogue: ChainCatalogue
beforeAll(async () => {
  catalogue = await loadChainCatalogue(defaultConfigDir())
  const devnet = catalogue.profiles.get('devnet')
  if (!devnet?.health_policy) throw new Error('the devnet profile has no health_policy')
  const profiles = new Map(catalogue.profiles)
  profiles.set('devnet', { ...devnet, health_policy: { ...devnet.health_policy, block_lag_reference: 'fleet' } })
  fleetCatalogue = { ...catalogue, profiles }
})

describe.each(DIALECTS)('policy evaluation on %s', (dialect) => {
  const { database } = freshDatabases(dialect)
  const evaluate = (db: Db, ms = 0, chains = fleetCatalogue) => evaluatePolicies(db, { now: at(ms), catalogue: chains, reportMaxAgeMs: 60 * SECOND, logger })

  async function reporting(db: Db, metrics: Record<string, number>, options: { state?: string; reportedAt?: number; processState?: string; health?: string; stateSince?: number } = {}) {
    const id = await nodeWith(db, { state: options.state ?? 'healthy', heartbeatAt: -5 * SECOND, applicationHealth: options.health ?? 'unknown', ...(options.stateSince !== undefined ? { stateSince: options.stateSince } : {}) })
    await db('agent_status').insert({
      node_id: id,
      reported_at: at(options.reportedAt ?? -5 * SECOND),
      agent_version: '0.1.0',
      binary_version: '1.0.0',
      sync_status: 'synced',
      process_state: options.processState ?? 'running',
      restarts_in_window: 0,
      metrics: toJson(metrics),
      running_command_ids: toJson([]),
    })
    return id
  }

  it('turns each node\'s report into ok, degraded or critical by the profile\'s rules, one event per change', async () => {
    const db = await database()
    const good = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 100 })
    const fewPeers = await reporting(db, { rpc_up: 1, peer_count: 1, block_height: 100 })
    const noPeers = await reporting(db, { rpc_up: 1, peer_count: 0, block_height: 100 })
    const rpcDown = await reporting(db, { rpc_up: 0 })
    const behind = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 90 })
    const farBehind = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 60 }, { state: 'syncing' })
    const crashing = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 100 }, { processState: 'crash_loop', state: 'degraded' })

    const result = await evaluate(db)
    const expected: Record<string, string> = { [good]: 'ok', [fewPeers]: 'degraded', [noPeers]: 'critical', [rpcDown]: 'critical', [behind]: 'degraded', [farBehind]: 'critical', [crashing]: 'critical' }
    for (const [id, health] of Object.entries(expected)) {
      expect((await nodeNow(db, id)).application_health, id).toBe(health)
      const events = await healthEvents(db, id)
      expect(events).toHaveLength(1)
      expect(events[0]).toMatchObject({ writer: 'policy_evaluation', dimension: 'application_health', from: 'unknown', to: health })
    }
    expect(result.changes).toHaveLength(7)
    // The node's state is not the policy's to write.
    expect((await nodeNow(db, farBehind)).state).toBe('syncing')

    // Nothing changed: nothing written.
    expect((await evaluate(db, 15 * SECOND)).changes).toEqual([])
    expect(await healthEvents(db, good)).toHaveLength(1)

    // The laggard catches up.
    await db('agent_status').where({ node_id: behind }).update({ metrics: toJson({ rpc_up: 1, peer_count: 3, block_height: 100 }), reported_at: at(20 * SECOND) })
    await db('agent_status').whereNot({ node_id: behind }).update({ reported_at: at(20 * SECOND) })
    const caughtUp = await evaluate(db, 30 * SECOND)
    expect(caughtUp.changes).toContainEqual({ node_id: behind, from: 'degraded', to: 'ok' })
  })

  it('a node whose chain process is not running (no metrics to judge) is critical', async () => {
    const db = await database()
    const stopped = await reporting(db, {}, { processState: 'stopped', state: 'degraded', health: 'ok' })
    expect((await evaluate(db)).changes).toEqual([{ node_id: stopped, from: 'ok', to: 'critical' }])
    expect((await healthEvents(db, stopped))[0]).toMatchObject({ reason: 'health policy of devnet: chain process stopped' })
  })

  it('names the rules a node breaks in its health event', async () => {
    const db = await database()
    const id = await reporting(db, { rpc_up: 0, peer_count: 1 })
    await evaluate(db)
    expect((await healthEvents(db, id))[0]).toMatchObject({ to: 'critical', reason: 'health policy of devnet: rpc_up 0 (critical below 1), peer_count 1 (degraded below 2)' })
  })

  it('does not judge a report received before the node\'s last state move, and judges the next one', async () => {
    const db = await database()
    // A migration moved the node out of maintenance 1 s ago; its new host's last report was taken
    // before the workflow started the chain.
    const migrated = await reporting(db, {}, { state: 'syncing', processState: 'stopped', reportedAt: -2 * SECOND, stateSince: -1 * SECOND })
    expect((await evaluate(db)).changes).toEqual([])
    expect(await healthEvents(db, migrated)).toEqual([])

    await db('agent_status').where({ node_id: migrated }).update({ process_state: 'running', metrics: toJson({ rpc_up: 1, peer_count: 3, block_height: 10 }), reported_at: at(1 * SECOND) })
    expect((await evaluate(db, 2 * SECOND)).changes).toEqual([{ node_id: migrated, from: 'unknown', to: 'ok' }])
  })

  it('leaves a node whose process is still starting unknown, and judges it once the agent reports it running', async () => {
    const db = await database()
    const coming = await reporting(db, { rpc_up: 0 }, { processState: 'starting' })
    expect((await evaluate(db)).changes).toEqual([])
    expect((await nodeNow(db, coming)).application_health).toBe('unknown')
    expect(await healthEvents(db, coming)).toEqual([])

    // The start-up grace is over and the chain still does not answer.
    await db('agent_status').where({ node_id: coming }).update({ process_state: 'running', reported_at: at(15 * SECOND) })
    expect((await evaluate(db, 15 * SECOND)).changes).toEqual([{ node_id: coming, from: 'unknown', to: 'critical' }])
  })

  it('with block_lag_reference node (devnet\'s) each node is measured against its own reported head; with fleet, against the median of the others', async () => {
    expect(catalogue.profiles.get('devnet')?.health_policy?.block_lag_reference).toBe('node')
    const db = await database()
    // Each its own devnet, started at different times: very different heads, all synced.
    const oldest = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 5_000 })
    const younger = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 4_980 })
    const youngest = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 40 })
    // Syncing: its own highest_block is its reference.
    const catchingUp = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 40, highest_block: 50 }, { state: 'syncing' })
    const farBehind = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 10, highest_block: 100 }, { state: 'syncing' })

    await evaluate(db, 0, catalogue)
    const own: Record<string, string> = { [oldest]: 'ok', [younger]: 'ok', [youngest]: 'ok', [catchingUp]: 'degraded', [farBehind]: 'critical' }
    for (const [id, health] of Object.entries(own)) expect((await nodeNow(db, id)).application_health, id).toBe(health)

    // The same reports measured against the fleet: each against the lower median of the others'
    // heads (100 or 50 here), so the three young nodes lag it and the two old ones do not.
    await evaluate(db, 15 * SECOND, fleetCatalogue)
    const fleet: Record<string, string> = { [oldest]: 'ok', [younger]: 'ok', [youngest]: 'critical', [catchingUp]: 'critical', [farBehind]: 'critical' }
    for (const [id, health] of Object.entries(fleet)) expect((await nodeNow(db, id)).application_health, id).toBe(health)
    expect(await healthEvents(db, youngest)).toMatchObject([{ from: 'unknown', to: 'ok' }, { from: 'ok', to: 'critical' }])
  })

  it('one agent reporting block_height=1e12 turns no other node critical through the real evaluation cycle; a real laggard still is', async () => {
    const db = await database()
    // Five tenants' nodes on one chain, all at the network's head, judged ok.
    const honest = await Promise.all([100, 101, 100, 99].map((h) => reporting(db, { rpc_up: 1, peer_count: 3, block_height: h }, { health: 'ok' })))
    const laggard = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 60 }, { health: 'ok' })
    const liar = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 1e12, highest_block: 1e12 }, { health: 'ok' })
    const cycle = () => runHealthEvaluationCycle(SETTINGS, { db, logger, chains: staticChainSource(fleetCatalogue) }, at(0))

    const result = await cycle()
    // Only the real laggard moves (40 behind the others' median of 100).
    expect(result.policies.changes).toEqual([{ node_id: laggard, from: 'ok', to: 'critical' }])
    for (const id of [...honest, liar]) {
      expect((await nodeNow(db, id)).application_health, id).toBe('ok')
      expect(await healthEvents(db, id), id).toEqual([])
    }

    // Two liars (a minority of seven) cannot move it either.
    const second = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 5e11 }, { health: 'ok' })
    expect((await cycle()).policies.changes).toEqual([])
    for (const id of [...honest, liar, second]) expect((await nodeNow(db, id)).application_health, id).toBe('ok')
  })

  it('with fewer than two other reporting nodes there is no fleet reference: block_lag is not judged', async () => {
    const db = await database()
    const honest = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 100 }, { health: 'ok' })
    const liar = await reporting(db, { rpc_up: 1, peer_count: 3, block_height: 1e12 }, { health: 'ok' })
    expect((await evaluate(db)).changes).toEqual([])
    expect((await nodeNow(db, honest)).application_health).toBe('ok')
    expect((await nodeNow(db, liar)).application_health).toBe('ok')
  })

  it('a missing or stale report is unknown; maintenance, provisioning and terminal nodes are not judged', async () => {
    const db = await database()
    const stale = await reporting(db, { rpc_up: 1, peer_count: 3 }, { reportedAt: -61 * SECOND, health: 'ok' })
    const silent = await nodeWith(db, { state: 'down', heartbeatAt: -10 * 60 * SECOND, applicationHealth: 'ok' })
    const skipped = await Promise.all(['maintenance', 'provisioning', 'terminating'].map((state) => reporting(db, { rpc_up: 0 }, { state, health: 'ok' })))

    await evaluate(db)
    expect((await nodeNow(db, stale)).application_health).toBe('unknown')
    expect((await healthEvents(db, stale))[0]).toMatchObject({ to: 'unknown', reason: 'no current agent report' })
    expect((await nodeNow(db, silent)).application_health).toBe('unknown')
    for (const id of skipped) {
      expect((await nodeNow(db, id)).application_health).toBe('ok')
      expect(await healthEvents(db, id)).toEqual([])
    }
  })
})
