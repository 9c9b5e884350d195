/**
 * The hourly uptime worker (spec, "Uptime rules"): every few minutes, on whichever replica holds
 * the job's lease, it turns the state log into hourly buckets. Set-based: nodes go in batches
 * (500 by default), and a batch is three statements whatever its size: one picks the nodes and
 * where each one's buckets stand, one reads their log rows for the whole range, one upserts the
 * buckets computed in memory (one statement on Postgres; chunks of 400 rows on SQLite).
 *
 * Per node, the worker recomputes from its oldest bucket still marked `is_complete = false`, or
 * else from the hour after its last complete bucket, or else from its first log entry; up to the
 * current hour, which is written incomplete. Nothing older than the retention is computed, and
 * buckets (and closed log rows) older than the retention are purged.
 */
import type { Db, Queryable } from '../db/knex.js'
import { isPostgres, toDateOrNull } from '../db/dialect.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { NODE_STATES } from '../nodes/states.js'
import { classOfState } from './classification.js'
import { computeHourlyBuckets, floorHour, HOUR_MS, type HourlyBucket, type LogInterval } from './compute.js'
import { STATE_LOG_TABLE } from './state-log.js'

export const UPTIME_ROLLUP_JOB = 'uptime-rollup'
export const BUCKETS_TABLE = 'uptime_hourly_buckets'

export const UPTIME_ROLLUP_DEFAULTS = {
  /** Spec: every 5 minutes. */
  intervalMs: 5 * 60_000,
  /** Spec: 500 nodes per batch. */
  batchSize: 500,
  /** Spec, Limits: 90 days. */
  retentionMs: 90 * 24 * HOUR_MS,
  /** An hour is final this long after it ended, so a state change committed late still lands in it. */
  settleMs: 60_000,
} as const

// SQLite writes a multi-row upsert as a compound SELECT, which allows at most 500 terms.
const UPSERT_CHUNK = 400
const TERMINAL_STATES = NODE_STATES.filter((s) => classOfState(s) === 'none')

export interface UptimeRollupOptions {
  now: Date
  batchSize?: number
  retentionMs?: number
  settleMs?: number
  logger?: Logger
}

export interface UptimeRollupResult {
  nodes: number
  batches: number
  buckets_written: number
  buckets_purged: number
  log_rows_purged: number
}

export async function runUptimeRollup(db: Db, options: UptimeRollupOptions): Promise<UptimeRollupResult> {
  const batchSize = options.batchSize ?? UPTIME_ROLLUP_DEFAULTS.batchSize
  const retentionMs = options.retentionMs ?? UPTIME_ROLLUP_DEFAULTS.retentionMs
  const settleMs = options.settleMs ?? UPTIME_ROLLUP_DEFAULTS.settleMs
  const now = options.now
  const oldestHour = floorHour(now.getTime() - retentionMs)
  const result: UptimeRollupResult = { nodes: 0, batches: 0, buckets_written: 0, buckets_purged: 0, log_rows_purged: 0 }

  Object.assign(result, await purgeExpired(db, new Date(oldestHour)))

  let after: string | undefined
  for (;;) {
    const positions = await nodePositions(db, after, batchSize)
    if (positions.length === 0) break
    after = positions[positions.length - 1]?.nodeId
    const starts = new Map(positions.map((p) => [p.nodeId, Math.max(oldestHour, startHour(p))]))
    const rangeStart = Math.min(...starts.values())
    const intervals = await readIntervals(db, [...starts.keys()], new Date(rangeStart), now)

    const buckets: HourlyBucket[] = []
    for (const [nodeId, from] of starts) {
      buckets.push(...computeHourlyBuckets(intervals.get(nodeId) ?? [], { nodeId, fromHourMs: from, now, settleMs }))
    }
    await db.transaction((trx) => upsertBuckets(trx, buckets, now))
    result.nodes += positions.length
    result.batches++
    result.buckets_written += buckets.length
    if (positions.length < batchSize) break
  }

  if (options.logger) options.logger.debug({ ...result }, 'uptime rollup')
  return result
}

interface NodePosition {
  nodeId: string
  lastComplete: Date | null
  firstIncomplete: Date | null
  firstEntered: Date | null
}

function startHour(p: NodePosition): number {
  const afterComplete = p.lastComplete ? p.lastComplete.getTime() + HOUR_MS : Infinity
  const incomplete = p.firstIncomplete?.getTime() ?? Infinity
  const start = Math.min(afterComplete, incomplete)
  if (start !== Infinity) return start
  return p.firstEntered ? floorHour(p.firstEntered.getTime()) : -Infinity
}

/**
 * The next batch of logged nodes (each has exactly one open log row, so the partial unique index
 * over open rows enumerates them in id order) with where their buckets stand. The literal
 * `is_complete = false` lets SQLite use the partial index, which a bound parameter would not.
 */
async function nodePositions(db: Queryable, after: string | undefined, limit: number): Promise<NodePosition[]> {
  const query = db(`${STATE_LOG_TABLE} as l`)
    .select('l.node_id')
    .select(
      db.raw(`(SELECT b.bucket_hour FROM ${BUCKETS_TABLE} b WHERE b.node_id = l.node_id AND b.is_complete = true ORDER BY b.bucket_hour DESC LIMIT 1) AS last_complete`),
      db.raw(`(SELECT b.bucket_hour FROM ${BUCKETS_TABLE} b WHERE b.node_id = l.node_id AND b.is_complete = false ORDER BY b.bucket_hour ASC LIMIT 1) AS first_incomplete`),
      db.raw(`(SELECT MIN(f.entered_at) FROM ${STATE_LOG_TABLE} f WHERE f.node_id = l.node_id) AS first_entered`),
    )
    .whereNull('l.exited_at')
    .orderBy('l.node_id')
    .limit(limit)
  if (after !== undefined) query.where('l.node_id', '>', after)
  const rows = (await query) as Record<string, unknown>[]
  return rows.map((r) => ({ nodeId: String(r.node_id), lastComplete: toDateOrNull(r.last_complete), firstIncomplete: toDateOrNull(r.first_incomplete), firstEntered: toDateOrNull(r.first_entered) }))
}

/** Log rows of these nodes overlapping [from, now), grouped by node. */
export async function readIntervals(db: Queryable, nodeIds: readonly string[], from: Date, now: Date): Promise<Map<string, LogInterval[]>> {
  const rows = (await db(STATE_LOG_TABLE)
    .select('node_id', 'state', 'entered_at', 'exited_at', 'trigger')
    .whereIn('node_id', nodeIds)
    .where('entered_at', '<', now)
    .where((q) => q.whereNull('exited_at').orWhere('exited_at', '>', from))) as Record<string, unknown>[]
  const byNode = new Map<string, LogInterval[]>()
  for (const r of rows) {
    const nodeId = String(r.node_id)
    let list = byNode.get(nodeId)
    if (!list) byNode.set(nodeId, (list = []))
    list.push({ state: String(r.state), entered_at: toDateOrNull(r.entered_at) as Date, exited_at: toDateOrNull(r.exited_at), trigger: String(r.trigger) })
  }
  return byNode
}

const BUCKET_COLUMNS = ['uptime_seconds', 'downtime_seconds', 'planned_downtime_seconds', 'unknown_seconds', 'total_seconds', 'is_complete', 'computed_at'] as const

async function upsertBuckets(db: Queryable, buckets: readonly HourlyBucket[], computedAt: Date): Promise<void> {
  if (buckets.length === 0) return
  if (isPostgres(db)) return upsertBucketsPostgres(db, buckets, computedAt)
  for (let i = 0; i < buckets.length; i += UPSERT_CHUNK) {
    const rows = buckets.slice(i, i + UPSERT_CHUNK).map((b) => ({ ...b, computed_at: computedAt }))
    await db(BUCKETS_TABLE)
      .insert(rows)
      .onConflict(['node_id', 'bucket_hour'])
      .merge([...BUCKET_COLUMNS])
  }
}

/**
 * Postgres: the whole batch in one statement, one array per column. The benchmark showed the
 * multi-row VALUES form (8 parameters a row, built by knex) at over half of a run's time.
 */
async function upsertBucketsPostgres(db: Queryable, buckets: readonly HourlyBucket[], computedAt: Date): Promise<void> {
  await db.raw(
    `INSERT INTO ${BUCKETS_TABLE} (node_id, bucket_hour, ${BUCKET_COLUMNS.join(', ')})
     SELECT node_id, bucket_hour, uptime_seconds, downtime_seconds, planned_downtime_seconds, unknown_seconds, total_seconds, is_complete, ?::timestamptz
     FROM unnest(?::uuid[], ?::timestamptz[], ?::int[], ?::int[], ?::int[], ?::int[], ?::int[], ?::boolean[])
       AS b(node_id, bucket_hour, uptime_seconds, downtime_seconds, planned_downtime_seconds, unknown_seconds, total_seconds, is_complete)
     ON CONFLICT (node_id, bucket_hour) DO UPDATE SET ${BUCKET_COLUMNS.map((c) => `${c} = excluded.${c}`).join(', ')}`,
    [
      computedAt,
      buckets.map((b) => b.node_id),
      buckets.map((b) => b.bucket_hour),
      buckets.map((b) => b.uptime_seconds),
      buckets.map((b) => b.downtime_seconds),
      buckets.map((b) => b.planned_downtime_seconds),
      buckets.map((b) => b.unknown_seconds),
      buckets.map((b) => b.total_seconds),
      buckets.map((b) => b.is_complete),
    ],
  )
}

/**
 * Buckets of hours before `oldestHour`, closed log rows that ended before it, and the open row of
 * a node that ended (terminal state) before it: nothing reads them any more, and the last keeps
 * long-gone nodes out of every later run.
 */
async function purgeExpired(db: Db, oldestHour: Date): Promise<{ buckets_purged: number; log_rows_purged: number }> {
  const buckets_purged = await db(BUCKETS_TABLE).where('bucket_hour', '<', oldestHour).del()
  const closed = await db(STATE_LOG_TABLE).where('exited_at', '<', oldestHour).del()
  const ended = await db(STATE_LOG_TABLE).whereNull('exited_at').whereIn('state', TERMINAL_STATES).where('entered_at', '<', oldestHour).del()
  return { buckets_purged, log_rows_purged: closed + ended }
}

export interface UptimeRollupSchedule extends JobSchedule {
  /** UPTIME_ROLLUP_INTERVAL (default 5 minutes). */
  intervalMs?: number
  /** UPTIME_ROLLUP_BATCH_SIZE (default 500). */
  batchSize?: number
  /** UPTIME_RETENTION (default 90 days). */
  retentionMs?: number
  settleMs?: number
}

/** Runs `runUptimeRollup` every interval on whichever replica holds the job's lease. */
export function scheduleUptimeRollup(options: UptimeRollupSchedule): PeriodicJob {
  return scheduleJobEvery(options, {
    name: UPTIME_ROLLUP_JOB,
    intervalMs: options.intervalMs ?? UPTIME_ROLLUP_DEFAULTS.intervalMs,
    run: async (now, logger) => {
      await runUptimeRollup(options.db, {
        now,
        logger,
        ...(options.batchSize !== undefined ? { batchSize: options.batchSize } : {}),
        ...(options.retentionMs !== undefined ? { retentionMs: options.retentionMs } : {}),
        ...(options.settleMs !== undefined ? { settleMs: options.settleMs } : {}),
      })
    },
  })
}
