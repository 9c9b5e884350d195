/**
 * The endpoint as a health signal (docs/health.md, "The endpoint as a health signal"): each
 * gateway counts, per node, the calls it sent on that the node answered and those that timed out
 * or could not reach it, and adds them every flush to the node's row of `rpc_upstream_health`
 * for the current one-minute window. Every gateway adds to the same row; a newer window replaces
 * the older one, and counts of a window already replaced are dropped. The policy evaluation
 * reads the row as `rpc_upstream_failure_ratio`.
 *
 * A merged read is one call to the node, counted once. A refusal by the gateway itself (rate
 * limit, policy, a node not serving) is not a call to the node and is not counted.
 */
import type { Db, Queryable } from '../db/knex.js'
import type { Logger } from '../log.js'
import { periodicFlush } from './periodic-flush.js'

export const UPSTREAM_HEALTH_WINDOW_MS = 60_000
/** Fewer calls than this in a window: too few to judge the node by. */
export const MIN_UPSTREAM_CALLS = 5
/** Unwritten node windows at most; beyond it new ones are dropped until a flush succeeds. */
const MAX_PENDING_NODES = 100_000

export interface UpstreamHealthRecorder {
  /** One call sent on to `nodeId`: answered, or timed out / unreachable. */
  record(nodeId: string, answered: boolean): void
  flush(): Promise<void>
  close(): Promise<void>
}

interface Pending {
  nodeId: string
  windowStartMs: number
  answered: number
  failed: number
}

export function windowStart(atMs: number): number {
  return Math.floor(atMs / UPSTREAM_HEALTH_WINDOW_MS) * UPSTREAM_HEALTH_WINDOW_MS
}

/** Adds the counts to the nodes' rows: summed within a window, replaced by a newer one, dropped when older. */
export async function addUpstreamCounts(db: Queryable, rows: readonly Pending[]): Promise<void> {
  const sameWindow = 'rpc_upstream_health.window_start_ms = excluded.window_start_ms'
  const newerWindow = 'rpc_upstream_health.window_start_ms < excluded.window_start_ms'
  const merged = (column: 'answered' | 'failed') =>
    db.raw(`CASE WHEN ${sameWindow} THEN rpc_upstream_health.${column} + excluded.${column} WHEN ${newerWindow} THEN excluded.${column} ELSE rpc_upstream_health.${column} END`)
  for (const row of rows) {
    await db('rpc_upstream_health')
      .insert({ node_id: row.nodeId, window_start_ms: row.windowStartMs, answered: row.answered, failed: row.failed })
      .onConflict('node_id')
      .merge({
        answered: merged('answered'),
        failed: merged('failed'),
        window_start_ms: db.raw(`CASE WHEN ${newerWindow} THEN excluded.window_start_ms ELSE rpc_upstream_health.window_start_ms END`),
      })
  }
}

/**
 * The share of calls to the node that failed, from its row, when the row's window is the current
 * or the last one and holds at least MIN_UPSTREAM_CALLS calls; undefined otherwise (not judged).
 */
export function upstreamFailureRatio(row: { window_start_ms: unknown; answered: unknown; failed: unknown }, nowMs: number): number | undefined {
  if (row.window_start_ms === null || row.window_start_ms === undefined) return undefined
  if (Number(row.window_start_ms) < windowStart(nowMs) - UPSTREAM_HEALTH_WINDOW_MS) return undefined
  const failed = Number(row.failed)
  const calls = Number(row.answered) + failed
  return calls < MIN_UPSTREAM_CALLS ? undefined : failed / calls
}

export function createUpstreamHealthRecorder(options: { db: Db; logger: Logger; flushMs: number; now?: () => number }): UpstreamHealthRecorder {
  const log = options.logger.child({ component: 'rpc-upstream-health' })
  const now = options.now ?? Date.now
  // Keyed by node and window: counts of a window that ended before a flush are still written (and dropped there if a newer window is in).
  let pending = new Map<string, Pending>()

  function record(nodeId: string, answered: boolean): void {
    const at = windowStart(now())
    const key = `${nodeId}|${at}`
    let counts = pending.get(key)
    if (!counts) {
      if (pending.size >= MAX_PENDING_NODES) return
      counts = { nodeId, windowStartMs: at, answered: 0, failed: 0 }
      pending.set(key, counts)
    }
    if (answered) counts.answered++
    else counts.failed++
  }

  async function flushOnce(): Promise<void> {
    if (pending.size === 0) return
    const taken = pending
    pending = new Map()
    try {
      // Oldest window first, so a node's newer window is never written before its older one.
      const rows = [...taken.values()].sort((a, b) => a.windowStartMs - b.windowStartMs)
      await options.db.transaction((trx) => addUpstreamCounts(trx, rows))
    } catch (err) {
      // Put the counts back (merged with what arrived meanwhile) for the next flush.
      for (const [key, counts] of taken) {
        const newer = pending.get(key)
        if (!newer) pending.set(key, counts)
        else {
          newer.answered += counts.answered
          newer.failed += counts.failed
        }
      }
      log.warn({ err, pending_nodes: pending.size }, 'rpc upstream health: cannot write the counts; retrying at the next flush')
    }
  }

  return { record, ...periodicFlush(flushOnce, options.flushMs) }
}
