/**
 * Health evaluation over a 100,000-node fleet (issue 7, "Benchmark"), on each database:
 *
 * 1. One heartbeat-evaluation cycle (reset, count, moves) — the aim is under 1 s.
 * 2. One whole evaluation cycle as the health-evaluator runs it every 15 s: heartbeats, the
 *    policy evaluation over every node's latest agent report, and the migration trigger.
 *
 * Baseline, same run and database: a bare scan reading the same node rows (id, state, heartbeat,
 * counter) into the process. Figures are cycles/s against scans/s over 5 interleaved rounds each.
 * 1% of the nodes stop heartbeating when the run starts: during the rounds they are counted, moved
 * down through the state machine (one round of heartbeat evaluation), judged `unknown` by the
 * policies (one round of the whole cycle) and handed to the migration trigger; the rest heartbeat.
 * The median is the steady cycle; the round in which the 1% change state is reported on its own
 * ("worst round"), since the median of 5 hides it.
 *
 * 3. A large outage: 10% of the fleet silent at once, all moved down in one heartbeat-evaluation
 *    cycle. Every move is its own transaction through the state machine (versioned update, state
 *    log, outbox event), so this cycle grows with the number of moves, not with the fleet; the
 *    figure gives moves/s against a bare single-row update transaction and what a whole-fleet
 *    outage would take at that rate.
 */
import { recordGatewayPresence } from '../src/agent-gateway/gateway-presence.js'
import { staticChainSource } from '../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../src/config/chains.js'
import { toJson } from '../src/db/dialect.js'
import type { Db } from '../src/db/knex.js'
import { runHealthEvaluationCycle, type HealthEvaluationSettings } from '../src/health/evaluator.js'
import { evaluateHeartbeats } from '../src/health/heartbeat-evaluation.js'
import { createLogger } from '../src/log.js'
import { benchDatabase, type Dialect } from './databases.js'
import { INSERT_CHUNK, insertFleet } from './fleet.js'
import { figure, throughput, type Bench, type BenchFigure } from './lib.js'

const FLEET = 100_000
const ROUNDS = 5
/** Share of the fleet going silent at once in the outage measurement. */
const OUTAGE_SHARE = 0.1
const INTERVAL_MS = 15_000
const logger = createLogger({ level: 'silent' })
const SETTINGS: HealthEvaluationSettings = {
  heartbeatTimeoutMs: 60_000,
  intervalMs: INTERVAL_MS,
  migrationGraceMs: 60_000,
  migrationCooldownMs: 3_600_000,
  migrationsPerCycle: 10,
}

export const benchHealth: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  // devnet's block lag is measured per node (each local devnet is a chain of its own); a real
  // chain's is measured against the fleet's head, the costlier path, so the bench measures that.
  const catalogue = await loadChainCatalogue(defaultConfigDir())
  const devnet = catalogue.profiles.get('devnet')
  if (!devnet?.health_policy) throw new Error('the devnet profile has no health_policy')
  const profiles = new Map(catalogue.profiles)
  profiles.set('devnet', { ...devnet, health_policy: { ...devnet.health_policy, block_lag_reference: 'fleet' } })
  const chains = staticChainSource({ ...catalogue, profiles })
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      const fleet = Math.max(2_000, Math.round(FLEET * ctx.scale))
      const start = Date.now()
      ctx.log(`${dialect}: creating ${fleet} nodes with agent reports`)
      await seed(db, fleet, new Date(start))
      // An agent-gateway receiving all along: without one, missed heartbeats are not counted
      // (docs/health.md) and no node would ever move down.
      await recordGatewayPresence(db, 'bench-agent-gateway', new Date(start - 3_600_000), new Date(start + 86_400_000))
      let clock = start
      const next = () => new Date((clock += INTERVAL_MS))
      const scan = () => db('nodes').select('id', 'state', 'last_heartbeat', 'consecutive_failures', 'heartbeat_checked_at')
      const timings = await rounds({
        scan: async () => ({ changes: 0, result: await scan() }),
        heartbeats: async () => {
          const r = await evaluateHeartbeats(db, { now: next(), heartbeatTimeoutMs: SETTINGS.heartbeatTimeoutMs, intervalMs: INTERVAL_MS, logger })
          return { changes: r.moves.length, result: r }
        },
        cycle: async () => {
          const r = await runHealthEvaluationCycle(SETTINGS, { db, logger, chains }, next())
          return { changes: r.heartbeats.moves.length + r.policies.changes.length + r.migrations.started.length, result: r }
        },
      })
      const scanRate = 1000 / timings.scan.median
      const hb = timings.heartbeats
      const cy = timings.cycle
      ctx.log(
        `${dialect}: scan ${timings.scan.median.toFixed(0)} ms, heartbeat evaluation ${hb.median.toFixed(0)} ms (worst ${hb.worst.toFixed(0)} ms; ${hb.busiest.changes} moves in ${hb.busiest.ms.toFixed(0)} ms), ` +
          `whole cycle ${cy.median.toFixed(0)} ms (worst ${cy.worst.toFixed(0)} ms; ${cy.busiest.changes} changes in ${cy.busiest.ms.toFixed(0)} ms)`,
      )
      const baseline = `bare scan of the ${fleet} node rows (${dialect})`
      const silent = Math.round(fleet / 100)
      figures.push(
        figure({
          name: `heartbeat-evaluation cycle over ${fleet} nodes, median of ${ROUNDS} rounds (${dialect}); ${hb.median.toFixed(0)} ms per cycle, worst round ${hb.worst.toFixed(0)} ms`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / hb.median,
          baselineValue: scanRate,
          aim: '< 1 s per cycle',
        }),
        figure({
          name: `heartbeat-evaluation cycle with 1% of the fleet changing state: ${hb.busiest.changes} of ${fleet} nodes moved down (${dialect}); ${hb.busiest.ms.toFixed(0)} ms`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / hb.busiest.ms,
          baselineValue: scanRate,
          aim: '< 1 s per cycle',
          notes: `The round of ${ROUNDS} in which the ${silent} silent nodes reach 3 timeouts; each move is its own state-machine transaction.`,
        }),
        figure({
          name: `whole health-evaluation cycle (heartbeats, policies over every agent report, migration trigger) over ${fleet} nodes, median of ${ROUNDS} rounds (${dialect}); ${cy.median.toFixed(0)} ms per cycle, worst round ${cy.worst.toFixed(0)} ms`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / cy.median,
          baselineValue: scanRate,
          aim: '< 15 s (the interval)',
        }),
        figure({
          name: `whole health-evaluation cycle with 1% of the fleet changing state: ${cy.busiest.changes} changes over ${fleet} nodes (${dialect}); ${cy.busiest.ms.toFixed(0)} ms`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / cy.busiest.ms,
          baselineValue: scanRate,
          aim: '< 15 s (the interval)',
          notes: `The round of ${ROUNDS} with the most changes: the ${silent} silent nodes' application_health set to unknown by the policies (one transaction per change), or their moves down, plus the migration trigger.`,
        }),
      )

      // A large outage: OUTAGE_SHARE of the fleet at its third timeout at once (agent-gateway down).
      const outageNodes = Math.max(100, Math.round(fleet * OUTAGE_SHARE))
      const outageNow = next()
      const healthyIds = (await db('nodes').where({ state: 'healthy' }).orderBy('id').limit(outageNodes).pluck('id')) as string[]
      for (let i = 0; i < healthyIds.length; i += INSERT_CHUNK) {
        await db('nodes')
          .whereIn('id', healthyIds.slice(i, i + INSERT_CHUNK))
          .update({ last_heartbeat: new Date(outageNow.getTime() - 10 * 60_000), consecutive_failures: 2, heartbeat_checked_at: null })
      }
      const outageStarted = performance.now()
      const outage = await evaluateHeartbeats(db, { now: outageNow, heartbeatTimeoutMs: SETTINGS.heartbeatTimeoutMs, intervalMs: INTERVAL_MS, logger })
      const outageMs = performance.now() - outageStarted
      // A figure of nothing moved would measure nothing: fail the run instead.
      if (outage.moves.length !== healthyIds.length) throw new Error(`the outage moved ${outage.moves.length} of ${healthyIds.length} silent nodes down`)
      if (hb.busiest.changes === 0) throw new Error('no round of the heartbeat evaluation moved a silent node down')
      const movesPerSecond = (outage.moves.length * 1000) / outageMs
      const probe = healthyIds[0]
      const bareRate = await throughput(
        () => db.transaction(async (trx) => void (await trx('nodes').where({ id: probe }).update({ updated_at: new Date() }))),
        { ms: Math.max(200, 1_000 * ctx.scale) },
      )
      const wholeFleetS = fleet / movesPerSecond
      ctx.log(`${dialect}: outage of ${outage.moves.length} nodes moved down in ${outageMs.toFixed(0)} ms (${movesPerSecond.toFixed(0)} moves/s; bare ${bareRate.toFixed(0)} tx/s)`)
      figures.push(
        figure({
          name: `heartbeat-evaluation cycle moving ${outage.moves.length} of ${fleet} nodes down at once (${dialect}); ${outageMs.toFixed(0)} ms, a whole-fleet outage ~${wholeFleetS.toFixed(0)} s`,
          baseline: `bare single-row update in a transaction (${dialect})`,
          unit: 'moves/s',
          value: movesPerSecond,
          baselineValue: bareRate,
          aim: '< 15 s (the interval) per cycle',
          notes:
            'Each state move is its own transaction through the state machine (versioned update, state-log rows, outbox event), so an outage cycle grows with the number of moves: ' +
            `${wholeFleetS > INTERVAL_MS / 1000 ? 'a fleet-wide outage takes longer than the 15 s interval' : 'a fleet-wide outage still fits in the 15 s interval'}` +
            `${wholeFleetS > 60 ? ' and than the 60 s evaluation lease (a second evaluator may overlap it; the optimistic lock keeps one event per move)' : ''}. Not changed: the figure documents it.`,
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}

interface RoundTimes {
  /** Median milliseconds. */
  median: number
  /** Milliseconds of the slowest round. */
  worst: number
  /** The round that changed the most (state moves, health changes, migrations started): its ms and changes. */
  busiest: { ms: number; changes: number }
}

/** Median and worst milliseconds of each operation over interleaved rounds (after one warm-up each). */
async function rounds<K extends string>(ops: Record<K, () => Promise<{ changes: number }>>): Promise<Record<K, RoundTimes>> {
  const names = Object.keys(ops) as K[]
  const samples = new Map<K, Array<{ ms: number; changes: number }>>(names.map((n) => [n, []]))
  for (const name of names) await ops[name]()
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) {
      const started = performance.now()
      const { changes } = await ops[name]()
      samples.get(name)?.push({ ms: performance.now() - started, changes })
    }
  }
  const result = {} as Record<K, RoundTimes>
  for (const name of names) {
    const sorted = [...(samples.get(name) ?? [])].sort((a, b) => a.ms - b.ms)
    const busiest = sorted.reduce((a, b) => (b.changes >= a.changes ? b : a), { ms: 0, changes: -1 })
    result[name] = { median: sorted[Math.floor(sorted.length / 2)]?.ms ?? 0, worst: sorted.at(-1)?.ms ?? 0, busiest }
  }
  return result
}

/** The fleet, every node with an agent report; 1% silent since `now`, the rest heartbeating. */
async function seed(db: Db, count: number, now: Date): Promise<void> {
  const ids = await insertFleet(db, count, new Date(now.getTime() - 3_600_000))
  // "Heartbeating" across every round of the run: a heartbeat time past the run's clock.
  const fresh = new Date(now.getTime() + 3_600_000)
  const silent = new Set(ids.filter((_, i) => i % 100 === 0))
  for (let i = 0; i < ids.length; i += INSERT_CHUNK) {
    const chunk = ids.slice(i, i + INSERT_CHUNK)
    await db.transaction(async (trx) => {
      await trx('agent_status').insert(
        chunk.map((id, j) => ({
          node_id: id,
          reported_at: silent.has(id) ? now : fresh,
          agent_version: '0.1.0',
          binary_version: '1.0.0',
          sync_status: 'synced',
          process_state: 'running',
          restarts_in_window: 0,
          metrics: toJson({ block_height: 1_000_000 - ((i + j) % 3), peer_count: 12, rpc_latency_ms: 3, rpc_up: 1 }),
          running_command_ids: toJson([]),
        })),
      )
      await trx('nodes').whereIn('id', chunk.filter((id) => !silent.has(id))).update({ last_heartbeat: fresh })
      await trx('nodes').whereIn('id', chunk.filter((id) => silent.has(id))).update({ last_heartbeat: now })
    })
  }
}
