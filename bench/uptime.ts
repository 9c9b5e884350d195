/**
 * Uptime (issue 7), on each database:
 *
 * 1. The hourly worker over a 100,000-node fleet for one hour: every node has a complete bucket
 *    for the hour before last, its log over the last hour (one in ten changed state during it),
 *    and the run finalises the hour that just ended and writes the current one. Against a bare
 *    scan of the same log rows (one query, rows to JavaScript, nothing computed or written).
 * 2. The 30-day read (`readUptimeSummary`: 720 buckets summed plus the current hour from the log)
 *    for 1,000 nodes with 30 days of buckets each: p99 latency, against a primary-key read of one
 *    bucket row in the same run.
 */
import type { Db } from '../src/db/knex.js'
import { uuidv7 } from '../src/db/ids.js'
import { HOUR_MS } from '../src/uptime/compute.js'
import { readUptimeSummary } from '../src/uptime/reads.js'
import { runUptimeRollup } from '../src/uptime/rollup.js'
import { benchDatabase, type Dialect } from './databases.js'
import { INSERT_CHUNK } from './fleet.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const FLEET = 100_000
const READ_NODES = 1_000
const READ_SAMPLES = 3_000
const RUNS = 3

export const benchUptime: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      // 10 minutes into an hour, so the run finalises the previous hour and writes the current one.
      const now = new Date(Math.floor(Date.now() / HOUR_MS) * HOUR_MS + 10 * 60_000)
      const fleet = Math.max(2_000, Math.round(FLEET * ctx.scale))
      ctx.log(`${dialect}: state log and buckets for ${fleet} nodes`)
      await seedFleet(db, fleet, now)
      figures.push(await worker(db, dialect, fleet, now, ctx.log))
      const readers = Math.max(100, Math.round(READ_NODES * ctx.scale))
      ctx.log(`${dialect}: 30 days of buckets for ${readers} nodes`)
      const ids = await seedHistory(db, readers, now)
      figures.push(await reads(db, dialect, ids, now))
    } finally {
      await drop()
    }
  }
  return figures
}

async function insertChunked(db: Db, table: string, rows: Record<string, unknown>[]): Promise<void> {
  await db.transaction(async (trx) => {
    for (let i = 0; i < rows.length; i += INSERT_CHUNK) await trx(table).insert(rows.slice(i, i + INSERT_CHUNK))
  })
}

/** Each node: healthy since two hours ago (one in ten down for 7 minutes in the last hour), a complete bucket for the hour before last. */
async function seedFleet(db: Db, count: number, now: Date): Promise<void> {
  const hour = Math.floor(now.getTime() / HOUR_MS) * HOUR_MS
  const since = new Date(hour - 2 * HOUR_MS)
  for (let start = 0; start < count; start += 10_000) {
    const log: Record<string, unknown>[] = []
    const buckets: Record<string, unknown>[] = []
    for (let i = start; i < Math.min(count, start + 10_000); i++) {
      const node_id = uuidv7()
      if (i % 10 === 0) {
        const down = new Date(hour - 40 * 60_000)
        const up = new Date(down.getTime() + 7 * 60_000)
        log.push({ node_id, state: 'healthy', entered_at: since, exited_at: down, trigger: 'bench' })
        log.push({ node_id, state: 'down', entered_at: down, exited_at: up, trigger: 'bench' })
        log.push({ node_id, state: 'healthy', entered_at: up, exited_at: null, trigger: 'bench' })
      } else {
        log.push({ node_id, state: 'healthy', entered_at: since, exited_at: null, trigger: 'bench' })
      }
      buckets.push(bucket(node_id, since.getTime(), since))
    }
    await insertChunked(db, 'uptime_state_log', log)
    await insertChunked(db, 'uptime_hourly_buckets', buckets)
  }
}

function bucket(node_id: string, hourMs: number, computedAt: Date): Record<string, unknown> {
  return { node_id, bucket_hour: new Date(hourMs), uptime_seconds: 3600, downtime_seconds: 0, unknown_seconds: 0, total_seconds: 3600, is_complete: true, computed_at: computedAt }
}

async function worker(db: Db, dialect: Dialect, fleet: number, now: Date, log: (l: string) => void): Promise<BenchFigure> {
  const hour = Math.floor(now.getTime() / HOUR_MS) * HOUR_MS
  const lastHour = new Date(hour - HOUR_MS)
  const workerMs: number[] = []
  const scanMs: number[] = []
  let written = 0
  for (let run = 0; run < RUNS; run++) {
    // Back to "the worker last ran in the hour before last" (not timed).
    await db('uptime_hourly_buckets').where('bucket_hour', '>=', lastHour).del()

    let started = performance.now()
    const rows = (await db('uptime_state_log')
      .select('node_id', 'state', 'entered_at', 'exited_at')
      .where((q) => q.whereNull('exited_at').orWhere('exited_at', '>', lastHour))) as unknown[]
    scanMs.push(performance.now() - started)
    if (rows.length < fleet) throw new Error(`bare scan read ${rows.length} rows for ${fleet} nodes`)

    started = performance.now()
    const result = await runUptimeRollup(db, { now })
    workerMs.push(performance.now() - started)
    written = result.buckets_written
    if (result.nodes !== fleet) throw new Error(`worker saw ${result.nodes} nodes, expected ${fleet}`)
    log(`${dialect}: run ${run + 1}: worker ${workerMs[run]!.toFixed(0)} ms, bare scan ${scanMs[run]!.toFixed(0)} ms`)
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const w = median(workerMs)
  const s = median(scanMs)
  return figure({
    name: `hourly uptime worker over ${fleet} nodes x 1 hour, batches of 500 (${dialect}); ${w.toFixed(0)} ms per run, ${written} buckets written`,
    baseline: `bare scan of the same log rows, one query (${dialect})`,
    unit: 'nodes/s',
    value: (fleet / w) * 1000,
    baselineValue: (fleet / s) * 1000,
    aim: '< 5 min per run (the interval)',
    notes: 'the worker reads per batch where each node stands, its log rows, and upserts the finished and the current hour; the baseline only reads',
  })
}

/** 30 days of complete buckets for `count` more nodes, each with an open log row. */
async function seedHistory(db: Db, count: number, now: Date): Promise<string[]> {
  const hour = Math.floor(now.getTime() / HOUR_MS) * HOUR_MS
  const ids: string[] = []
  for (let start = 0; start < count; start += 50) {
    const log: Record<string, unknown>[] = []
    const buckets: Record<string, unknown>[] = []
    for (let i = start; i < Math.min(count, start + 50); i++) {
      const node_id = uuidv7()
      ids.push(node_id)
      log.push({ node_id, state: 'healthy', entered_at: new Date(hour - 31 * 24 * HOUR_MS), exited_at: null, trigger: 'bench' })
      for (let h = 1; h <= 720; h++) buckets.push(bucket(node_id, hour - h * HOUR_MS, now))
    }
    await insertChunked(db, 'uptime_state_log', log)
    await insertChunked(db, 'uptime_hourly_buckets', buckets)
  }
  return ids
}

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!
}

async function reads(db: Db, dialect: Dialect, ids: string[], now: Date): Promise<BenchFigure> {
  const hour = new Date(Math.floor(now.getTime() / HOUR_MS) * HOUR_MS - HOUR_MS)
  const ours: number[] = []
  const bare: number[] = []
  const pick = (i: number) => ids[(i * 7919) % ids.length]!
  for (let i = 0; i < 200; i++) {
    await readUptimeSummary(db, pick(i), '30d', now)
    await db('uptime_hourly_buckets').where({ node_id: pick(i), bucket_hour: hour }).first()
  }
  for (let i = 0; i < READ_SAMPLES; i++) {
    let started = performance.now()
    const summary = await readUptimeSummary(db, pick(i), '30d', now)
    ours.push(performance.now() - started)
    if (summary.uptime_seconds < 719 * 3600) throw new Error(`30d read summed ${summary.uptime_seconds} s`)
    started = performance.now()
    await db('uptime_hourly_buckets').where({ node_id: pick(i), bucket_hour: hour }).first()
    bare.push(performance.now() - started)
  }
  const p99 = percentile(ours, 0.99)
  const p50 = percentile(ours, 0.5)
  const bareP99 = percentile(bare, 0.99)
  return figure({
    name: `30-day uptime read of one node, 720 buckets + the current hour from the log (${dialect}); p99 ${p99.toFixed(2)} ms, p50 ${p50.toFixed(2)} ms`,
    baseline: `primary-key read of one bucket row, p99 ${bareP99.toFixed(2)} ms (ratio = bare p99 / ours)`,
    unit: 'reads/s at p99',
    value: 1000 / p99,
    baselineValue: 1000 / bareP99,
    aim: 'p99 < 5 ms absolute',
  })
}
