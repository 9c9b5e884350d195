/**
 * Health evaluation over a 100,000-node fleet (issue 7, "Benchmark"), on each database:
 *
 * 1. One heartbeat-evaluation cycle (reset, count, moves) — the aim is under 1 s.
 * 2. One whole evaluation cycle as the health-evaluator runs it every 15 s: heartbeats, the
 *    policy evaluation over every node's latest agent report, and the migration trigger.
 *
 * Baseline, same run and database: a bare scan reading the same node rows (id, state, heartbeat,
 * counter) into the process. Figures are cycles/s against scans/s (the median of 5 rounds each,
 * interleaved). The fleet is steady: 1% of the nodes have stopped heartbeating (counted, then
 * moved down through the state machine, then left alone), the rest heartbeat.
 */
import { staticChainSource } from '../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../src/config/chains.js'
import { toJson } from '../src/db/dialect.js'
import type { Db } from '../src/db/knex.js'
import { runHealthEvaluationCycle, type HealthEvaluationSettings } from '../src/health/evaluator.js'
import { evaluateHeartbeats } from '../src/health/heartbeat-evaluation.js'
import { createLogger } from '../src/log.js'
import { benchDatabase, type Dialect } from './databases.js'
import { INSERT_CHUNK, insertFleet } from './fleet.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const FLEET = 100_000
const ROUNDS = 5
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
  const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      const fleet = Math.max(2_000, Math.round(FLEET * ctx.scale))
      const start = Date.now()
      ctx.log(`${dialect}: creating ${fleet} nodes with agent reports`)
      await seed(db, fleet, new Date(start))
      let clock = start
      const next = () => new Date((clock += INTERVAL_MS))
      const scan = () => db('nodes').select('id', 'state', 'last_heartbeat', 'consecutive_failures', 'heartbeat_checked_at')
      const timings = await rounds({
        scan,
        heartbeats: () => evaluateHeartbeats(db, { now: next(), heartbeatTimeoutMs: SETTINGS.heartbeatTimeoutMs, intervalMs: INTERVAL_MS, logger }),
        cycle: () => runHealthEvaluationCycle(SETTINGS, { db, logger, chains }, next()),
      })
      const scanRate = 1000 / timings.scan
      ctx.log(`${dialect}: scan ${timings.scan.toFixed(0)} ms, heartbeat evaluation ${timings.heartbeats.toFixed(0)} ms, whole cycle ${timings.cycle.toFixed(0)} ms`)
      const baseline = `bare scan of the ${fleet} node rows (${dialect})`
      figures.push(
        figure({
          name: `heartbeat-evaluation cycle over ${fleet} nodes (${dialect}); ${timings.heartbeats.toFixed(0)} ms per cycle`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / timings.heartbeats,
          baselineValue: scanRate,
          aim: '< 1 s per cycle',
        }),
        figure({
          name: `whole health-evaluation cycle (heartbeats, policies over every agent report, migration trigger) over ${fleet} nodes (${dialect}); ${timings.cycle.toFixed(0)} ms per cycle`,
          baseline,
          unit: 'cycles/s',
          value: 1000 / timings.cycle,
          baselineValue: scanRate,
          aim: '< 15 s (the interval)',
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}

/** Median milliseconds of each operation over interleaved rounds. */
async function rounds<K extends string>(ops: Record<K, () => Promise<unknown>>): Promise<Record<K, number>> {
  const names = Object.keys(ops) as K[]
  const samples = new Map<K, number[]>(names.map((n) => [n, []]))
  for (const name of names) await ops[name]()
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) {
      const started = performance.now()
      await ops[name]()
      samples.get(name)?.push(performance.now() - started)
    }
  }
  const result = {} as Record<K, number>
  for (const name of names) {
    const sorted = [...(samples.get(name) ?? [])].sort((a, b) => a - b)
    result[name] = sorted[Math.floor(sorted.length / 2)] ?? 0
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
