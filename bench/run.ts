/**
 * `npm run bench`: starts a real Postgres and nats-server (the test helpers), runs every
 * benchmark, writes bench/results/latest.json and latest.md. BENCH_SCALE=0.25 for a quick run.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { startNats } from '../test/helpers/nats.js'
import { startPostgres } from '../test/helpers/postgres.js'
import { benchAuth } from './auth.js'
import { benchEvents } from './events.js'
import { benchHealth } from './health.js'
import { benchHeartbeats } from './heartbeats.js'
import { benchPayments } from './payments.js'
import { benchPaymentsDaemons } from './payments-daemons.js'
import { benchRecovery } from './recovery.js'
import { benchRollouts } from './rollouts.js'
import { benchRpcGateway } from './rpc-gateway.js'
import { benchApiLoad } from './api-load.js'
import { benchFleetLoad } from './fleet-load.js'
import type { Bench, BenchFigure } from './lib.js'
import { benchStateMachine } from './state-machine.js'
import { benchWorkflows } from './workflows.js'
import { benchUptime } from './uptime.js'

const BENCHES: Record<string, Bench> = {
  'state-machine': benchStateMachine,
  events: benchEvents,
  auth: benchAuth,
  workflows: benchWorkflows,
  heartbeats: benchHeartbeats,
  payments: benchPayments,
  'payments-daemons': benchPaymentsDaemons,
  uptime: benchUptime,
  health: benchHealth,
  rollouts: benchRollouts,
  'api-load': benchApiLoad,
  'fleet-load': benchFleetLoad,
  recovery: benchRecovery,
  'rpc-gateway': benchRpcGateway,
}

const resultsDir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results')

async function main(): Promise<void> {
  const only = process.argv.slice(2)
  const scale = Number(process.env.BENCH_SCALE ?? '1')
  const postgres = await startPostgres()
  const nats = await startNats()
  const fresh: RecordedFigure[] = []
  const ranAt = new Date().toISOString()
  try {
    for (const [name, bench] of Object.entries(BENCHES)) {
      if (only.length > 0 && !only.includes(name)) continue
      process.stderr.write(`bench ${name}...\n`)
      const figures = await bench({ postgresUrl: postgres.url, natsUrl: nats.url, scale, log: (l) => process.stderr.write(`  ${l}\n`) })
      fresh.push(...figures.map((f) => ({ ...f, bench: name, ran_at: ranAt })))
      writeResults(fresh, ranAt, scale)
    }
  } finally {
    await nats.destroy()
    await postgres.stop()
  }

  process.stdout.write(writeResults(fresh, ranAt, scale))
}

/**
 * Writes latest.json and latest.md: the previous figures of benches not re-run, then the fresh
 * ones. Called after every bench, so a bench that crashes the process keeps the others' figures.
 */
function writeResults(fresh: RecordedFigure[], ranAt: string, scale: number): string {
  // `npm run bench -- payments` re-measures one bench: the others' figures stay as last measured.
  const figures = mergeFigures(readPrevious(), fresh, new Set(fresh.map((f) => f.bench)))
  const run = {
    ran_at: ranAt,
    machine: { cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model ?? 'unknown', memory_gib: Math.round(os.totalmem() / 2 ** 30), node: process.version },
    scale,
    figures,
  }
  fs.mkdirSync(resultsDir, { recursive: true })
  fs.writeFileSync(path.join(resultsDir, 'latest.json'), `${JSON.stringify(run, null, 2)}\n`)
  const rows = figures.map(
    (f) => `| ${f.name} | ${shown(f.value)} ${f.unit} | ${f.baseline}: ${shown(f.baselineValue)} | **${f.ratio.toFixed(2)}** | ${f.aim ?? ''} | ${(f.ran_at ?? '').slice(0, 10)} |`,
  )
  const md = [
    `# Benchmark results (${run.ran_at})`,
    '',
    `${run.machine.cpus} cores (${run.machine.cpu_model}), ${run.machine.memory_gib} GiB, Node ${run.machine.node}, scale ${scale}.`,
    'Each figure is a ratio against a baseline measured in the same run on the same machine; a bench run alone (`npm run bench -- NAME`) replaces only its own rows.',
    '',
    '| measured | value | baseline | ratio | aim | measured on |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n')
  fs.writeFileSync(path.join(resultsDir, 'latest.md'), md)
  return md
}

/** Whole numbers from 100 up, three significant digits below (0.38 cycles/s, not 0). */
function shown(value: number): string {
  return Math.abs(value) >= 100 ? value.toFixed(0) : value.toPrecision(3)
}

/** A figure with the bench and the run that measured it. */
type RecordedFigure = BenchFigure & { bench?: string; ran_at?: string }

function readPrevious(): RecordedFigure[] {
  try {
    const previous = JSON.parse(fs.readFileSync(path.join(resultsDir, 'latest.json'), 'utf8')) as { ran_at?: string; figures?: RecordedFigure[] }
    return (previous.figures ?? []).map((f) => ({ ...f, ran_at: f.ran_at ?? previous.ran_at }))
  } catch {
    return []
  }
}

/** The previous figures of benches not re-run (kept in their order), then the fresh ones. */
export function mergeFigures(previous: RecordedFigure[], fresh: RecordedFigure[], rerun: ReadonlySet<string | undefined>): RecordedFigure[] {
  const freshNames = new Set(fresh.map((f) => f.name))
  return [...previous.filter((f) => !rerun.has(f.bench) && !freshNames.has(f.name)), ...fresh]
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`)
  process.exitCode = 1
})
