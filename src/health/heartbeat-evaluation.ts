/**
 * Heartbeat evaluation (spec: "Node state", known drivers; docs/health.md): one cycle over the
 * whole fleet in a handful of statements.
 *
 * 1. A node whose heartbeat is fresh again gets its consecutive-failure counter back to 0.
 * 2. A node in syncing, healthy or degraded whose last heartbeat (or, if later, its entry into
 *    that state) is older than the heartbeat timeout gets one more failure — once per cycle:
 *    `heartbeat_checked_at` keeps an overlapping cycle of another evaluator from counting the
 *    same timeout again.
 * 3. Moves through the health state machine's set-based path (one health event each), up to
 *    1,000 per transaction:
 *    - 3 consecutive failures -> down (only once the node has been in its state for longer than
 *      the timeout: every state change resets the counter, and this guard keeps a counter that
 *      was somehow left over from taking a node just back from a migration straight down);
 *    - down with a fresh heartbeat (the grace before its migration starts) -> healthy;
 *    - syncing whose agent reports synced, heartbeat fresh -> healthy.
 * Nodes in maintenance are skipped (spec); provisioning is the provision workflow's business.
 *
 * Steps 2 and 3's move to down are held while no agent-gateway has been receiving heartbeats for
 * the whole timeout (issue 22; src/agent-gateway/gateway-presence.ts): with every gateway gone, or back
 * for less than the timeout, a missing heartbeat says nothing about the node, and counting it
 * would take a healthy fleet down (and then migrate it) for an outage of the control plane's own.
 */
import { heartbeatsReceivedSince } from '../agent-gateway/gateway-presence.js'
import type { Db } from '../db/knex.js'
import { isConcurrentWriteFailure } from '../db/errors.js'
import { ConflictError } from '../errors.js'
import { notifyCommitted } from '../events/outbox.js'
import type { Logger } from '../log.js'
import { applyHealthChanges, type HealthChangesResult } from '../nodes/health-state-machine.js'
import { nodeFromRow, type NodeRecord } from '../nodes/node-store.js'
import type { NodeState } from '../nodes/states.js'

/** Spec: heartbeat timeout 60 s. */
export const HEARTBEAT_TIMEOUT_MS = 60_000
/** Spec: consecutive failures before DOWN. */
export const FAILURES_BEFORE_DOWN = 3
/** States whose heartbeats count toward `down`. */
export const HEARTBEAT_EVALUATED_STATES: readonly NodeState[] = ['syncing', 'healthy', 'degraded']
/** Moves written per transaction; long enough to amortise the commit, short enough not to hold many row locks for long. */
const MOVES_PER_TRANSACTION = 1_000

export interface HeartbeatEvaluationOptions {
  now: Date
  heartbeatTimeoutMs: number
  /** The cycle interval: a node is counted at most once per half of it. */
  intervalMs: number
  logger: Logger
}

export interface NodeMove {
  node_id: string
  from: NodeState
  to: NodeState
}

export interface HeartbeatEvaluationResult {
  /** Nodes whose counter went back to 0. */
  reset: number
  /** Nodes that got one more consecutive failure. */
  counted: number
  moves: NodeMove[]
  /** Moves refused because another writer changed the node first; the next cycle sees it again. */
  conflicts: number
  /**
   * Since when some gateway has been receiving without a break (no further back than the timeout);
   * null when none is. Timeouts are counted only when this is a whole timeout ago.
   */
  receivingSince: Date | null
}

type NodeRowOf = Parameters<typeof nodeFromRow>[0]

export async function evaluateHeartbeats(db: Db, options: HeartbeatEvaluationOptions): Promise<HeartbeatEvaluationResult> {
  const { now } = options
  const cutoff = new Date(now.getTime() - options.heartbeatTimeoutMs)
  const countedBefore = new Date(now.getTime() - Math.max(1, Math.floor(options.intervalMs / 2)))
  const receivingSince = await heartbeatsReceivedSince(db, now, cutoff)
  const judging = receivingSince !== null && receivingSince.getTime() <= cutoff.getTime()
  if (receivingSince === null) {
    options.logger.warn('no agent-gateway is receiving heartbeats; missed heartbeats are not counted until one has been up for the heartbeat timeout')
  } else if (!judging) {
    options.logger.info({ receiving_since: receivingSince.toISOString(), counting_from: new Date(receivingSince.getTime() + options.heartbeatTimeoutMs).toISOString() }, 'agent-gateways receiving again after none was; missed heartbeats counted once they have been up for the heartbeat timeout')
  }

  const reset = await db('nodes')
    .whereIn('state', [...HEARTBEAT_EVALUATED_STATES, 'down'])
    .where('consecutive_failures', '>', 0)
    .where('last_heartbeat', '>=', cutoff)
    .update({ consecutive_failures: 0 })

  const counted = !judging
    ? 0
    : await db('nodes')
    .whereIn('state', HEARTBEAT_EVALUATED_STATES)
    .where((q) => q.whereNull('last_heartbeat').orWhere('last_heartbeat', '<', cutoff))
    .where('state_changed_at', '<', cutoff)
    .where((q) => q.whereNull('heartbeat_checked_at').orWhere('heartbeat_checked_at', '<=', countedBefore))
    .update({ consecutive_failures: db.raw('consecutive_failures + 1'), heartbeat_checked_at: now })

  const candidates = (await db('nodes')
    .where((q) =>
      q
        .where((failing) =>
            failing
            .whereRaw(judging ? '1 = 1' : '1 = 0')
            .whereIn('state', HEARTBEAT_EVALUATED_STATES)
            .where('consecutive_failures', '>=', FAILURES_BEFORE_DOWN)
            .where('state_changed_at', '<', cutoff)
            // A heartbeat that landed since the count (the statements are not one transaction) saves the node.
            .where((q) => q.whereNull('last_heartbeat').orWhere('last_heartbeat', '<', cutoff)),
          )
        .orWhere((back) => back.where('state', 'down').where('last_heartbeat', '>=', cutoff))
        .orWhere((synced) => synced.where({ state: 'syncing', sync_status: 'synced', consecutive_failures: 0 }).where('last_heartbeat', '>=', cutoff)),
    )
    .select('*')) as NodeRowOf[]

  // Moves are written set-based, a chunk per transaction: a fleet-wide outage costs a few
  // statements per chunk, not a handful of round trips per node; a node another writer changed
  // first is left out of its chunk as a conflict and judged again next cycle.
  const moves: NodeMove[] = []
  let conflicts = 0
  for (let i = 0; i < candidates.length; i += MOVES_PER_TRANSACTION) {
    const chunk = candidates.slice(i, i + MOVES_PER_TRANSACTION).map((row) => {
      const node = nodeFromRow(row)
      const move = moveFor(node)
      return { node, change: { writer: 'heartbeat_evaluation' as const, state: move.to }, reason: move.reason }
    })
    let result: HealthChangesResult
    try {
      result = await db.transaction((trx) => applyHealthChanges(trx, chunk, now))
    } catch (err) {
      // SQLite: another writer held the database past busy_timeout, before the transaction began.
      if (!(err instanceof ConflictError) && !isConcurrentWriteFailure(err)) throw err
      const message = err instanceof ConflictError ? err.message : 'the database was busy'
      result = { applied: [], conflicts: chunk.map(({ node }) => ({ nodeId: node.id, message })) }
    }
    notifyCommitted()
    for (const { node, event } of result.applied) moves.push({ node_id: node.id, from: event.previous.state, to: node.state })
    for (const conflict of result.conflicts) options.logger.debug({ nodeId: conflict.nodeId, err: conflict.message }, 'node changed during heartbeat evaluation; next cycle')
    conflicts += result.conflicts.length
  }
  return { reset, counted, moves, conflicts, receivingSince }
}

function moveFor(node: NodeRecord): { to: NodeState; reason: string } {
  if (node.state === 'down') return { to: 'healthy', reason: 'heartbeat received while down' }
  if (node.consecutive_failures >= FAILURES_BEFORE_DOWN) {
    return { to: 'down', reason: `${node.consecutive_failures} consecutive heartbeat timeouts` }
  }
  return { to: 'healthy', reason: 'agent reports synced' }
}
