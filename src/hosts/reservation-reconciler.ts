/**
 * The reservation reconciler (docs/infrastructure.md, "Reservations that outlive their node"):
 * a `host_reservations` row is released when nothing can use it any more, and never while it
 * holds a live node.
 *
 * A row outlives its node's use when the `ssh` provider could not remove the node from its host:
 * a node terminated, or a failed provisioning compensated, while its host was unreachable; a
 * migration's old host (destroyed best effort) or a failed migration's new host that could not be
 * reached; an orchestrator killed between placing and bootstrapping, with no step left to retry.
 *
 * One pass:
 * 1. reads the rows older than `minAgeMs` (a placement younger than that may belong to a step that
 *    has not recorded it yet), with their host's state and their node's;
 * 2. keeps a row when its node is live and runs there (`nodes.host_id` is `<host id>/<host key>`)
 *    or its live node records no host yet, when a provision, migrate or terminate run of its node
 *    is still going (that run uses the row or removes it), and when its host is `unreachable`
 *    (nothing can be cleaned up there now; a later pass does it once the host answers);
 * 3. for every other row, removes what is left of the node on the host (the provider's
 *    `destroyHost`: stop the agent and chain, remove the directory) and then the row; on a removed
 *    host only the row goes.
 *
 * A process killed mid-pass has released some rows; the next pass finds the rest. A row whose
 * host fails the clean-up stays, and is tried again next pass.
 */
import type { Db, Queryable } from '../db/knex.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { isTerminalState, type NodeState } from '../nodes/states.js'
import { MIGRATE_WORKFLOW, PROVISION_WORKFLOW, TERMINATE_WORKFLOW } from '../provisioning/workflow-names.js'
import type { HostState } from './host-states.js'

export const RESERVATION_RECONCILE_JOB = 'host-reservation-reconcile'

/** A placement is left alone this long after it was made (see the header). */
export const DEFAULT_RESERVATION_MIN_AGE_MS = 10 * 60_000

export interface StaleReservation {
  host_key: string
  host_id: string
  node_id: string
  host_state: HostState
  /** Why nothing uses it any more. */
  reason: string
}

const IN_FLIGHT = ['pending', 'running', 'sleeping']

/** The nodes among `nodeIds` that a provision, migrate or terminate run is still working on. */
async function nodesInFlight(db: Queryable, nodeIds: readonly string[]): Promise<Set<string>> {
  if (nodeIds.length === 0) return new Set()
  const runs = (await db('workflow_runs')
    .whereIn('status', IN_FLIGHT)
    .where((q) => void q.where((r) => void r.whereIn('workflow_name', [PROVISION_WORKFLOW, TERMINATE_WORKFLOW]).whereIn('workflow_key', nodeIds)).orWhere('workflow_name', MIGRATE_WORKFLOW))
    .select('workflow_name', 'workflow_key')) as Array<{ workflow_name: string; workflow_key: string }>
  const wanted = new Set(nodeIds)
  // A migration's key is `<node id>:<triggered at>`.
  return new Set(runs.map((r) => (r.workflow_name === MIGRATE_WORKFLOW ? r.workflow_key.split(':')[0] ?? '' : r.workflow_key)).filter((id) => wanted.has(id)))
}

/** The reservations nothing uses any more (see the header), optionally on one host only. */
export async function findStaleReservations(db: Queryable, options: { now: Date; minAgeMs: number; hostId?: string }): Promise<StaleReservation[]> {
  const q = db('host_reservations as r')
    .join('hosts as h', 'h.id', 'r.host_id')
    .leftJoin('nodes as n', 'n.id', 'r.node_id')
    .where('r.created_at', '<=', new Date(options.now.getTime() - options.minAgeMs))
    .select('r.host_key', 'r.host_id', 'r.node_id', 'h.state as host_state', 'n.state as node_state', 'n.host_id as node_host_id')
    .orderBy('r.created_at')
  if (options.hostId) q.where('r.host_id', options.hostId)
  const rows = (await q) as Array<{ host_key: string; host_id: string; node_id: string; host_state: HostState; node_state: NodeState | null; node_host_id: string | null }>
  const busy = await nodesInFlight(db, [...new Set(rows.map((r) => r.node_id))])
  const stale: StaleReservation[] = []
  for (const r of rows) {
    if (r.host_state === 'unreachable' || busy.has(r.node_id)) continue
    if (r.node_state === null) {
      stale.push({ host_key: r.host_key, host_id: r.host_id, node_id: r.node_id, host_state: r.host_state, reason: 'its node no longer exists' })
    } else if (isTerminalState(r.node_state)) {
      stale.push({ host_key: r.host_key, host_id: r.host_id, node_id: r.node_id, host_state: r.host_state, reason: `its node is ${r.node_state}` })
    } else if (r.node_host_id !== null && r.node_host_id !== `${r.host_id}/${r.host_key}`) {
      stale.push({ host_key: r.host_key, host_id: r.host_id, node_id: r.node_id, host_state: r.host_state, reason: `its node runs on ${r.node_host_id}; this placement was left behind` })
    }
  }
  return stale
}

export interface ReservationReconcilerDeps {
  db: Db
  logger: Logger
  /** Removes what is left of a node on its fleet host and releases the row (the `ssh` provider's destroyHost). */
  destroy(providerHostId: string): Promise<void>
  minAgeMs?: number
}

export interface ReconcileResult {
  released: string[]
  failed: Array<{ host_key: string; error: string }>
}

/** One pass (see the header); `hostId` limits it to one host (a drain before it cordons its host). */
export async function reconcileReservations(deps: ReservationReconcilerDeps, now: Date, hostId?: string): Promise<ReconcileResult> {
  const stale = await findStaleReservations(deps.db, { now, minAgeMs: deps.minAgeMs ?? DEFAULT_RESERVATION_MIN_AGE_MS, ...(hostId ? { hostId } : {}) })
  const result: ReconcileResult = { released: [], failed: [] }
  for (const r of stale) {
    const log = { host_id: r.host_id, host_key: r.host_key, node_id: r.node_id, reason: r.reason }
    try {
      await deps.destroy(`${r.host_id}/${r.host_key}`)
      result.released.push(r.host_key)
      deps.logger.info(log, 'stale host reservation released: what was left of its node on the host is removed')
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err)
      result.failed.push({ host_key: r.host_key, error })
      deps.logger.warn({ ...log, err: error }, 'stale host reservation kept: its host could not be cleaned up; the next pass tries again')
    }
  }
  return result
}

export function scheduleReservationReconciler(schedule: JobSchedule, deps: ReservationReconcilerDeps, intervalMs: number): PeriodicJob {
  return scheduleJobEvery(schedule, { name: RESERVATION_RECONCILE_JOB, intervalMs, run: async (now) => void (await reconcileReservations(deps, now)) })
}
