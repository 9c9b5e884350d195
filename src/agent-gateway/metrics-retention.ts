/**
 * Node metrics retention (spec: Limits, "Metrics retention: 30 days"). The node metrics kept in
 * the database are the agents' reports in `agent_status` (one row per node: the latest
 * heartbeat's metrics, process state and sync status). A report older than the retention belongs
 * to a node that has not reported for a month (terminated, failed, or its host gone); it is
 * deleted. A report that old is never fresh enough for policy evaluation or rollout health
 * validation, so neither notices; an agent that reports again writes its row anew.
 *
 * One run deletes in batches of `batchSize` rows, one statement (and, outside a transaction, one
 * commit) per batch, until a batch comes back short. A process dying between batches leaves
 * only expired rows behind, which the next run deletes.
 */
import type { Db } from '../db/knex.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'

export const NODE_METRICS_PURGE_JOB = 'node-metrics-purge'

export const NODE_METRICS_RETENTION_DEFAULTS = {
  /** Spec: metrics retention 30 days. */
  retentionMs: 30 * 86_400_000,
  intervalMs: 3_600_000,
  batchSize: 1_000,
} as const

export interface NodeMetricsPurgeOptions {
  now: Date
  retentionMs?: number
  batchSize?: number
}

export interface NodeMetricsPurgeResult {
  deleted: number
  batches: number
}

export async function purgeExpiredNodeMetrics(db: Db, options: NodeMetricsPurgeOptions): Promise<NodeMetricsPurgeResult> {
  const retentionMs = options.retentionMs ?? NODE_METRICS_RETENTION_DEFAULTS.retentionMs
  const batchSize = options.batchSize ?? NODE_METRICS_RETENTION_DEFAULTS.batchSize
  const cutoff = new Date(options.now.getTime() - retentionMs)
  const result: NodeMetricsPurgeResult = { deleted: 0, batches: 0 }
  for (;;) {
    // The outer `reported_at` condition is checked again against a row a heartbeat updated
    // while this statement ran (Postgres re-reads it), so a fresh report is never deleted.
    const deleted = await db('agent_status')
      .whereIn('node_id', db('agent_status').where('reported_at', '<', cutoff).select('node_id').limit(batchSize))
      .where('reported_at', '<', cutoff)
      .del()
    result.batches += 1
    result.deleted += deleted
    if (deleted < batchSize) return result
  }
}

export interface NodeMetricsPurgeSchedule extends JobSchedule {
  intervalMs?: number
  retentionMs?: number
  batchSize?: number
}

/** Runs `purgeExpiredNodeMetrics` every interval on whichever replica holds the job's lease. */
export function scheduleNodeMetricsPurge(options: NodeMetricsPurgeSchedule): PeriodicJob {
  return scheduleJobEvery(options, {
    name: NODE_METRICS_PURGE_JOB,
    intervalMs: options.intervalMs ?? NODE_METRICS_RETENTION_DEFAULTS.intervalMs,
    run: async (now, logger) => {
      const purged = await purgeExpiredNodeMetrics(options.db, {
        now,
        ...(options.retentionMs !== undefined ? { retentionMs: options.retentionMs } : {}),
        ...(options.batchSize !== undefined ? { batchSize: options.batchSize } : {}),
      })
      if (purged.deleted > 0) logger.info(purged, 'expired node metrics deleted')
    },
  })
}
