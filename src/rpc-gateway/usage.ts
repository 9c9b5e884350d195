/**
 * Durable usage of the customers' endpoints (docs/rpc-gateway.md, "Usage"): JSON-RPC calls per
 * hour, node, API key and method, with errors and a latency histogram, in `rpc_usage` (migration
 * 0017). A gateway counts in memory and adds its counts to the rows every few seconds in one
 * transaction of upserts that sum, never a write per request, so any number of gateways share the
 * same rows. Read back by `GET /api/v1/nodes/{id}/usage` (readNodeUsage) and pruned after
 * USAGE_RETENTION_MS (pruneUsage, the gateway's housekeeping job).
 */
import type { Db, Queryable } from '../db/knex.js'
import type { Logger } from '../log.js'
import { periodicFlush } from './periodic-flush.js'

export const USAGE_BUCKET_MS = 3_600_000
export const USAGE_RETENTION_MS = 8 * 86_400_000
export const USAGE_WINDOWS = ['24h', '7d'] as const
export type UsageWindow = (typeof USAGE_WINDOWS)[number]
const WINDOW_HOURS: Record<UsageWindow, number> = { '24h': 24, '7d': 168 }

/** Upper bounds (ms) of the latency buckets; the columns of migration 0017 are named after them. */
export const LATENCY_BOUNDS_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000] as const
const LATENCY_COLUMNS = [...LATENCY_BOUNDS_MS.map((b) => `latency_le_${b}`), 'latency_over'] as const

/** Method names are the caller's text: only plain names are stored, anything else counts as `other`. */
const METHOD_NAME = /^[A-Za-z0-9_.]{1,64}$/
export const OTHER_METHOD = 'other'
/** Distinct methods kept per node, key and hour before further new names count as `other` (bounds what a caller can make us store). */
export const MAX_METHODS_PER_KEY_HOUR = 100

interface Counts {
  requests: number
  errors: number
  latencyMsSum: number
  histogram: number[]
}

interface PendingRow extends Counts {
  bucketStartMs: number
  nodeId: string
  apiKeyId: string
  method: string
}

export interface UsageCall {
  nodeId: string
  apiKeyId: string
  method: string
  error: boolean
  latencyMs: number
  at: number
}

export interface UsageRecorder {
  record(call: UsageCall): void
  /** Writes what is counted so far; on failure the counts are kept for the next flush. */
  flush(): Promise<void>
  /** Stops the timer and flushes once more. */
  close(): Promise<void>
}

function bucketIndex(latencyMs: number): number {
  const index = LATENCY_BOUNDS_MS.findIndex((bound) => latencyMs <= bound)
  return index === -1 ? LATENCY_BOUNDS_MS.length : index
}

/** Counts past this many pending rows are dropped (logged) rather than growing memory without bound while the database is away. */
const MAX_PENDING_ROWS = 50_000

export function createUsageRecorder(options: { db: Db; logger: Logger; flushMs: number }): UsageRecorder {
  const log = options.logger.child({ component: 'rpc-usage' })
  let pending = new Map<string, PendingRow>()
  // node|key|hour -> distinct methods seen in this process (for the `other` cap).
  const methodsSeen = new Map<string, Set<string>>()
  let droppedLogged = false

  function methodName(call: UsageCall, bucketStartMs: number): string {
    if (!METHOD_NAME.test(call.method)) return OTHER_METHOD
    const scope = `${call.nodeId}|${call.apiKeyId}|${bucketStartMs}`
    let seen = methodsSeen.get(scope)
    if (!seen) {
      seen = new Set()
      methodsSeen.set(scope, seen)
    }
    if (seen.has(call.method)) return call.method
    if (seen.size >= MAX_METHODS_PER_KEY_HOUR) return OTHER_METHOD
    seen.add(call.method)
    return call.method
  }

  function record(call: UsageCall): void {
    const bucketStartMs = Math.floor(call.at / USAGE_BUCKET_MS) * USAGE_BUCKET_MS
    const method = methodName(call, bucketStartMs)
    const key = `${call.nodeId}|${call.apiKeyId}|${bucketStartMs}|${method}`
    let row = pending.get(key)
    if (!row) {
      if (pending.size >= MAX_PENDING_ROWS) {
        if (!droppedLogged) log.warn({ pending_rows: pending.size }, 'rpc usage: too many unwritten rows (is the database down?); dropping new counts until a flush succeeds')
        droppedLogged = true
        return
      }
      row = { bucketStartMs, nodeId: call.nodeId, apiKeyId: call.apiKeyId, method, requests: 0, errors: 0, latencyMsSum: 0, histogram: new Array<number>(LATENCY_COLUMNS.length).fill(0) }
      pending.set(key, row)
    }
    row.requests++
    if (call.error) row.errors++
    row.latencyMsSum += call.latencyMs
    row.histogram[bucketIndex(call.latencyMs)]!++
  }

  async function write(rows: PendingRow[]): Promise<void> {
    const db = options.db
    await db.transaction(async (trx) => {
      for (const row of rows) {
        const values: Record<string, string | number> = {
          bucket_start_ms: row.bucketStartMs,
          node_id: row.nodeId,
          api_key_id: row.apiKeyId,
          method: row.method,
          requests: row.requests,
          errors: row.errors,
          latency_ms_sum: row.latencyMsSum,
        }
        LATENCY_COLUMNS.forEach((column, i) => (values[column] = row.histogram[i] ?? 0))
        const sums = Object.fromEntries(
          ['requests', 'errors', 'latency_ms_sum', ...LATENCY_COLUMNS].map((column) => [column, trx.raw('?? + ??', [`rpc_usage.${column}`, `excluded.${column}`])]),
        )
        await trx('rpc_usage').insert(values).onConflict(['node_id', 'bucket_start_ms', 'api_key_id', 'method']).merge(sums)
      }
    })
  }

  async function flushOnce(): Promise<void> {
    if (pending.size === 0) return
    const taken = pending
    pending = new Map()
    try {
      await write([...taken.values()])
      droppedLogged = false
    } catch (err) {
      // Put the counts back (merged with what arrived meanwhile) for the next flush.
      for (const [key, row] of taken) {
        const newer = pending.get(key)
        if (!newer) pending.set(key, row)
        else {
          newer.requests += row.requests
          newer.errors += row.errors
          newer.latencyMsSum += row.latencyMsSum
          row.histogram.forEach((n, i) => (newer.histogram[i] = (newer.histogram[i] ?? 0) + n))
        }
      }
      log.warn({ err, pending_rows: pending.size }, 'rpc usage: cannot write the counts; retrying at the next flush')
    }
    // Forget method sets of past hours.
    const currentHour = Math.floor(Date.now() / USAGE_BUCKET_MS) * USAGE_BUCKET_MS
    for (const scope of methodsSeen.keys()) {
      if (Number(scope.split('|')[2]) < currentHour - USAGE_BUCKET_MS) methodsSeen.delete(scope)
    }
  }

  return { record, ...periodicFlush(flushOnce, options.flushMs) }
}

export async function pruneUsage(db: Queryable, before: number): Promise<number> {
  return Number(await db('rpc_usage').where('bucket_start_ms', '<', before).del())
}

export interface LatencySummary {
  p50_ms: number | null
  p99_ms: number | null
  mean_ms: number | null
}

export interface UsageFigures extends LatencySummary {
  requests: number
  errors: number
}

export interface NodeUsage {
  node_id: string
  window: UsageWindow
  window_start: string
  window_end: string
  totals: UsageFigures
  methods: Array<UsageFigures & { method: string }>
  api_keys: Array<{ api_key_id: string; requests: number; errors: number }>
}

/**
 * A quantile read from the histogram: the upper bound of the bucket holding it (so "p99 ≤ 25 ms");
 * in the open last bucket, the last bound (the answer then says "over 10 s" through `p99_ms` = 10000).
 */
function quantile(histogram: number[], total: number, q: number): number | null {
  if (total === 0) return null
  const rank = Math.ceil(q * total)
  let seen = 0
  for (let i = 0; i < histogram.length; i++) {
    seen += histogram[i] ?? 0
    if (seen >= rank) return LATENCY_BOUNDS_MS[Math.min(i, LATENCY_BOUNDS_MS.length - 1)] as number
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1] as number
}

function figures(row: Record<string, unknown>): UsageFigures {
  const requests = Number(row.requests ?? 0)
  const histogram = LATENCY_COLUMNS.map((column) => Number(row[column] ?? 0))
  return {
    requests,
    errors: Number(row.errors ?? 0),
    p50_ms: quantile(histogram, requests, 0.5),
    p99_ms: quantile(histogram, requests, 0.99),
    mean_ms: requests === 0 ? null : Math.round((Number(row.latency_ms_sum ?? 0) / requests) * 100) / 100,
  }
}

/** The window is whole hours ending with the current one (as the uptime figures are). */
export async function readNodeUsage(db: Queryable, nodeId: string, window: UsageWindow, now: Date): Promise<NodeUsage> {
  const currentHour = Math.floor(now.getTime() / USAGE_BUCKET_MS) * USAGE_BUCKET_MS
  const start = currentHour - (WINDOW_HOURS[window] - 1) * USAGE_BUCKET_MS
  const sums = ['requests', 'errors', 'latency_ms_sum', ...LATENCY_COLUMNS].map((column) => db.raw('sum(??) as ??', [column, column]))
  const base = () => db('rpc_usage').where('node_id', nodeId).andWhere('bucket_start_ms', '>=', start)
  const [totals, byMethod, byKey] = await Promise.all([
    base().first(sums) as Promise<Record<string, unknown> | undefined>,
    base().groupBy('method').select('method', ...sums) as Promise<Array<Record<string, unknown>>>,
    base().groupBy('api_key_id').select('api_key_id', db.raw('sum(requests) as requests'), db.raw('sum(errors) as errors')) as Promise<Array<Record<string, unknown>>>,
  ])
  const methods = byMethod.map((row) => ({ method: String(row.method), ...figures(row) }))
  methods.sort((a, b) => b.requests - a.requests || a.method.localeCompare(b.method))
  const apiKeys = byKey.map((row) => ({ api_key_id: String(row.api_key_id), requests: Number(row.requests), errors: Number(row.errors) }))
  apiKeys.sort((a, b) => b.requests - a.requests || a.api_key_id.localeCompare(b.api_key_id))
  return {
    node_id: nodeId,
    window,
    window_start: new Date(start).toISOString(),
    window_end: now.toISOString(),
    totals: figures(totals ?? {}),
    methods,
    api_keys: apiKeys,
  }
}
