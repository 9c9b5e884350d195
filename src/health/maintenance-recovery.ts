/**
 * Maintenance recovery (spec: "A node left in maintenance is recovered by a periodic check",
 * default every 30 minutes; docs/health.md). A node is left in maintenance when the workflow
 * that put it there died or gave up without taking it out. After `afterMs` in maintenance, and
 * only when nothing holds it any more — no unfinished lifecycle workflow run of the node (a
 * migration's key starts with the node id) and no rollout node of it in progress or validating
 * in a rollout that is not over (pending, scheduled, running, or paused: a rollout rolling back
 * is paused, and one paused by its operator or its threshold lets its batch finish) or whose
 * group is still active (a group under `rollback_all` rolls back the nodes of its finished
 * components) — it is moved to `syncing` by the `maintenance_recovery` writer with its failure
 * counter cleared. From there the heartbeat evaluation decides as for any node: synced with fresh
 * heartbeats -> healthy; no heartbeats -> down after three timeouts -> migrated after the grace.
 */
import type { Db } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import type { Logger } from '../log.js'
import { applyHealthUpdate } from '../nodes/health-state-machine.js'
import { nodeFromRow } from '../nodes/node-store.js'
import { ACTIVE_GROUP_STATUSES, ACTIVE_ROLLOUT_STATUSES } from '../rollouts/states.js'

const LIVE_RUN_STATUSES = ['pending', 'running', 'sleeping']
const ROLLOUT_NODE_HOLDING = ['in_progress', 'validating']

export interface MaintenanceRecoveryOptions {
  now: Date
  /** How long a node may stay in maintenance before it counts as left there. */
  afterMs: number
  logger: Logger
}

export interface MaintenanceRecoveryResult {
  recovered: string[]
  /** Left in maintenance past the threshold, but still held by a live workflow or rollout. */
  held: number
}

export async function recoverMaintenance(db: Db, options: MaintenanceRecoveryOptions): Promise<MaintenanceRecoveryResult> {
  const { now } = options
  const overdue = db('nodes').where('state', 'maintenance').where('state_changed_at', '<=', new Date(now.getTime() - options.afterMs))
  const rows = (await overdue
    .clone()
    .whereNotExists((q) =>
      q
        .select(db.raw('1'))
        .from('workflow_runs')
        .whereIn('workflow_runs.status', LIVE_RUN_STATUSES)
        // Provision and terminate runs are keyed by the node id, migrations by "<node id>:<time>".
        .where((k) => k.whereRaw('workflow_runs.workflow_key = CAST(nodes.id AS TEXT)').orWhereRaw("workflow_runs.workflow_key LIKE CAST(nodes.id AS TEXT) || ':%'")),
    )
    .whereNotExists((q) =>
      q
        .select(db.raw('1'))
        .from('rollout_nodes')
        .join('rollouts', 'rollouts.id', 'rollout_nodes.rollout_id')
        .whereRaw('rollout_nodes.node_id = nodes.id')
        .whereIn('rollout_nodes.status', ROLLOUT_NODE_HOLDING)
        .where((live) =>
          live
            .whereIn('rollouts.status', ACTIVE_ROLLOUT_STATUSES)
            .orWhereExists((g) => g.select(db.raw('1')).from('rollout_groups').whereRaw('rollout_groups.id = rollouts.group_id').whereIn('rollout_groups.status', ACTIVE_GROUP_STATUSES)),
        ),
    )
    .select('*')) as Parameters<typeof nodeFromRow>[0][]
  const overdueCount = Number(((await overdue.clone().count({ n: '*' }).first()) as { n: number | string } | undefined)?.n ?? 0)

  const result: MaintenanceRecoveryResult = { recovered: [], held: overdueCount - rows.length }
  for (const row of rows) {
    const node = nodeFromRow(row)
    try {
      await db.transaction(async (trx) => {
        const written = await applyHealthUpdate(trx, {
          nodeId: node.id,
          current: node,
          change: { writer: 'maintenance_recovery', state: 'syncing' },
          reason: `left in maintenance since ${node.state_changed_at.toISOString()} with no workflow holding it`,
          now,
        })
        if (written.changed) await trx('nodes').where({ id: node.id }).update({ consecutive_failures: 0, heartbeat_checked_at: null })
      })
      result.recovered.push(node.id)
      options.logger.warn({ nodeId: node.id, since: node.state_changed_at.toISOString() }, 'node left in maintenance recovered to syncing')
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err
      options.logger.debug({ nodeId: node.id, err: err.message }, 'node changed during maintenance recovery')
    }
  }
  return result
}

