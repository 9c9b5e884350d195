/**
 * The `host-drain` workflow (docs/infrastructure.md, "Drain"), key = the drain's id: moves every
 * node off a `draining` fleet host, one at a time, through the migrate workflow as an operator
 * action (forced: no failure cooldown; the migration still waits for the old agent's fence), then
 * marks the host `cordoned`.
 *
 * Each round, one step looks at the host:
 * - the host is no longer `draining` (uncordoned, removed) or the drain was ended: it ends
 *   `cancelled` (a migration already started finishes on its own);
 * - no live node is left: what is left of terminated nodes is cleaned up (the reservation
 *   reconciler, for this host), the host becomes `cordoned`, the drain `completed`;
 * - a migration of one of its nodes is under way (this drain's, from before an orchestrator
 *   crash, or anyone's): the drain waits for it;
 * - a node that can migrate (healthy, degraded, down): its room on another ready host of its
 *   region is reserved first, under the host key its migration will create; then the migration
 *   starts and finds that placement. No host with room: the drain stops at once with the reason
 *   (the host stays `draining`, the node keeps running where it is, the operator is notified); a
 *   new `host drain` continues. Reserving first is what keeps a drain from failing a live node:
 *   a migration that cannot place its new host fails the node;
 * - only nodes that cannot migrate now (provisioning, syncing, in another workflow's maintenance,
 *   terminating): the drain waits for them to finish, and says so in its activity.
 * A migration that fails stops the drain with its error. Waits poll from inside one step (a
 * migration every poll interval, nodes that cannot move every drain poll interval), so a long
 * wait journals one step per minute rather than a step and a timer per look; each look also sees
 * an uncordon. Every step is safe to run again, so a killed orchestrator's drain resumes where it
 * was.
 */
import { toDateOrNull } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import { finishDrain, findDrain, updateDrainProgress, type DrainStatus, type HostDrain } from '../hosts/drains.js'
import { nextHostState } from '../hosts/host-states.js'
import { releaseReservation } from '../hosts/placement.js'
import { reconcileReservations } from '../hosts/reservation-reconciler.js'
import { countLiveNodesOnHost, findHostById, updateHostState, type Host } from '../hosts/store.js'
import { createNotification } from '../notifications/notifications.js'
import { TERMINAL_NODE_STATES, type NodeState } from '../nodes/states.js'
import { findRunByKey, getRun, type WorkflowContext } from '../workflows/index.js'
import { providerFor, type LifecycleDeps } from './deps.js'
import { SshInfrastructureProvider } from './infrastructure/ssh.js'
import { requestMigration } from './triggers.js'
import { MIGRATABLE_STATES, MIGRATE_WORKFLOW, migrationHostKey, migrationKey } from './workflow-names.js'

export interface HostDrainInput {
  drainId: string
  hostId: string
}

export interface HostDrainResult {
  drain_id: string
  host_id: string
  status: Exclude<DrainStatus, 'running'>
  nodes_moved: number
  stop_reason?: string
}

type Ended = { end: Exclude<DrainStatus, 'running'> }
/** `waitingOn`: what the host held when the round chose to wait (absent in rounds journaled before it: `wait`). */
type Round = Ended | { empty: true } | { wait: string; waitingOn?: 'wait' | 'movable' } | { migration: { nodeId: string; runId: string } }

/** How often a drain looks again at nodes it waits for (provisioning, syncing, ...). */
const DEFAULT_DRAIN_POLL_MS = 1_000
/** One watch or wait step lasts at most this long. */
const WATCH_MS = 60_000
const WATCH_STEP = { timeoutMs: WATCH_MS + 60_000, heartbeatTimeoutMs: 60_000 }

export function hostDrainWorkflow(deps: LifecycleDeps) {
  const now = () => (deps.now ?? (() => new Date()))()
  const pollMs = deps.drainPollIntervalMs ?? DEFAULT_DRAIN_POLL_MS
  return async (ctx: WorkflowContext, input: HostDrainInput): Promise<HostDrainResult> => {
    const result = async (): Promise<HostDrainResult> => ctx.step('result', async () => drainResult(deps, input))
    for (;;) {
      const round = await ctx.step('next-node', () => nextRound(deps, input, now()))
      if ('end' in round) return result()
      if ('empty' in round) {
        if (await ctx.step('complete', () => completeDrain(deps, input, now()))) return result()
        continue
      }
      if ('wait' in round) {
        const seen = await ctx.step('wait-for-nodes', (step) => waitForNodes(deps, input, round.waitingOn ?? 'wait', pollMs, step.heartbeat), WATCH_STEP)
        if (seen === 'cancelled') return result()
        continue
      }
      const { nodeId, runId } = round.migration
      for (;;) {
        const seen = await ctx.step('watch-migration', (step) => watchMigration(deps, input, runId, step.heartbeat), WATCH_STEP)
        if (seen === 'cancelled') return result()
        if (seen === 'ended') break
      }
      if (await ctx.step('migration-ended', () => afterMigration(deps, input, nodeId, runId, now()))) return result()
    }
  }
}

async function drainResult(deps: LifecycleDeps, input: HostDrainInput): Promise<HostDrainResult> {
  const drain = (await findDrain(deps.db, input.drainId)) as HostDrain
  const status = drain.status === 'running' ? 'cancelled' : drain.status
  return { drain_id: drain.id, host_id: drain.host_id, status, nodes_moved: drain.nodes_moved, ...(drain.stop_reason ? { stop_reason: drain.stop_reason } : {}) }
}

interface NodeOnHost {
  id: string
  state: NodeState
  region: string | null
  instance_type: string | null
  last_migration_triggered_at: unknown
}

/** Live nodes the `ssh` provider recorded on the host, oldest first. */
async function liveNodesOn(db: Queryable, hostId: string): Promise<NodeOnHost[]> {
  return (await db('nodes')
    .where('provider', 'ssh')
    .andWhere('host_id', 'like', `${hostId}/%`)
    .whereNotIn('state', [...TERMINAL_NODE_STATES])
    .orderBy([{ column: 'created_at' }, { column: 'id' }])
    .select('id', 'state', 'region', 'instance_type', 'last_migration_triggered_at')) as NodeOnHost[]
}

/** The drain still running on a host still draining; otherwise the drain is ended as cancelled. */
async function stillDraining(deps: LifecycleDeps, input: HostDrainInput, now: Date): Promise<{ host: Host; drain: HostDrain } | null> {
  const drain = await findDrain(deps.db, input.drainId)
  if (!drain || drain.status !== 'running') return null
  const host = await findHostById(deps.db, input.hostId)
  if (host?.state === 'draining') return { host, drain }
  await finishDrain(deps.db, drain.id, { status: 'cancelled' }, now)
  deps.logger.info({ host_id: input.hostId, drain_id: drain.id, state: host?.state }, 'host drain cancelled: the host is no longer draining')
  return null
}

/** What the host holds now, without acting on it (only a drain no longer wanted is ended). */
type Look = { end: true } | { empty: true } | { migration: { nodeId: string; runId: string } } | { movable: NodeOnHost; host: Host } | { wait: string; nodeId: string | null }

async function lookAtHost(deps: LifecycleDeps, input: HostDrainInput, now: Date): Promise<Look> {
  const draining = await stillDraining(deps, input, now)
  if (!draining) return { end: true }
  const { host } = draining
  const nodes = await liveNodesOn(deps.db, host.id)
  if (nodes.length === 0 && (await countLiveNodesOnHost(deps.db, host.id)) === 0) return { empty: true }

  // A migration under way (ours from before a crash, the health evaluator's, an operator's).
  for (const node of nodes) {
    const triggered = toDateOrNull(node.last_migration_triggered_at)
    if (node.state !== 'maintenance' || !triggered) continue
    const run = await findRunByKey(deps.db, MIGRATE_WORKFLOW, migrationKey(node.id, triggered))
    if (run && run.status !== 'completed' && run.status !== 'failed') return { migration: { nodeId: node.id, runId: run.id } }
  }

  const node = nodes.find((n) => MIGRATABLE_STATES.includes(n.state))
  if (node) return { movable: node, host }
  const activity = nodes.length > 0 ? `waiting: ${nodes.map((n) => `node ${n.id} is ${n.state}`).join('; ')}`.slice(0, 500) : 'waiting: a node is being placed on the host'
  return { wait: activity, nodeId: nodes[0]?.id ?? null }
}

async function nextRound(deps: LifecycleDeps, input: HostDrainInput, now: Date): Promise<Round> {
  const look = await lookAtHost(deps, input, now)
  if ('end' in look) return { end: 'cancelled' }
  if ('empty' in look) return look
  if ('migration' in look) {
    await updateDrainProgress(deps.db, input.drainId, { current_node_id: look.migration.nodeId, activity: `waiting for the migration of node ${look.migration.nodeId} under way` }, now)
    return { migration: look.migration }
  }
  if ('wait' in look) {
    await updateDrainProgress(deps.db, input.drainId, { current_node_id: look.nodeId, activity: look.wait }, now)
    return { wait: look.wait, waitingOn: 'wait' }
  }
  const { movable: node, host } = look

  const provider = providerFor(deps, 'ssh')
  if (!(provider instanceof SshInfrastructureProvider)) throw new Error('the ssh provider cannot reserve placements')
  if (!node.region || !node.instance_type) return stop(deps, input, host, node.id, `node ${node.id} has no region or instance type recorded; it cannot be placed elsewhere`, now)
  const placement = await provider.reserve({ nodeId: node.id, hostKey: migrationHostKey(node.id, now), region: node.region, instanceType: node.instance_type })
  if (!placement) {
    return stop(deps, input, host, node.id, `no host with capacity in region ${node.region} for node ${node.id} (instance type ${node.instance_type}); add or uncordon a host, then drain again`, now)
  }
  let started
  try {
    started = await requestMigration(deps.db, node.id, { reason: `host ${host.name} is being drained`, force: true, now })
  } catch (err) {
    await releaseReservation(deps.db, placement.reservation.host_key)
    if (err instanceof ConflictError) return { wait: err.message, waitingOn: 'movable' }
    throw err
  }
  // Another attempt was under way after all: wait for it; the room reserved for ours is not needed.
  if (started.run.workflowKey !== migrationKey(node.id, now)) await releaseReservation(deps.db, placement.reservation.host_key)
  await updateDrainProgress(deps.db, input.drainId, { current_node_id: node.id, activity: `moving node ${node.id} to host ${placement.host.name}` }, now)
  deps.logger.info({ host: host.name, node_id: node.id, to: placement.host.name, drain_id: input.drainId }, 'host drain: moving a node')
  return { migration: { nodeId: node.id, runId: started.run.id } }
}

/**
 * Watches the migration run (and the host: an uncordon ends the drain) every poll interval for up
 * to WATCH_MS, then returns `running` so the workflow journals one step per minute of a long
 * migration rather than one per look.
 */
async function watchMigration(deps: LifecycleDeps, input: HostDrainInput, runId: string, heartbeat: () => void): Promise<'running' | 'ended' | 'cancelled'> {
  const clock = deps.now ?? (() => new Date())
  const until = clock().getTime() + WATCH_MS
  for (;;) {
    heartbeat()
    if (!(await stillDraining(deps, input, clock()))) return 'cancelled'
    const run = await getRun(deps.db, runId)
    if (!run || run.status === 'completed' || run.status === 'failed') return 'ended'
    if (clock().getTime() >= until) return 'running'
    await new Promise((resolve) => setTimeout(resolve, deps.pollIntervalMs))
  }
}

/**
 * Waits, looking at the host every `pollMs` for up to WATCH_MS, until what it holds changes kind
 * (the nodes it waited for can move, are gone, or a migration started): the next round acts on
 * it. A round that had to wait on a node that can move (its migration request was refused) waits
 * likewise for that to change, instead of asking again at once.
 */
async function waitForNodes(deps: LifecycleDeps, input: HostDrainInput, waitingOn: 'wait' | 'movable', pollMs: number, heartbeat: () => void): Promise<'changed' | 'waiting' | 'cancelled'> {
  const clock = deps.now ?? (() => new Date())
  const until = clock().getTime() + WATCH_MS
  for (;;) {
    heartbeat()
    const look = await lookAtHost(deps, input, clock())
    if ('end' in look) return 'cancelled'
    if (!(waitingOn in look)) return 'changed'
    if (clock().getTime() >= until) return 'waiting'
    await new Promise((resolve) => setTimeout(resolve, pollMs))
  }
}

/** Counts a moved node, or stops the drain at a failed migration; true when the drain ended. */
async function afterMigration(deps: LifecycleDeps, input: HostDrainInput, nodeId: string, runId: string, now: Date): Promise<boolean> {
  const run = await getRun(deps.db, runId)
  const draining = await stillDraining(deps, input, now)
  if (!draining) return true
  if (run?.status === 'failed') {
    await stop(deps, input, draining.host, nodeId, `the migration of node ${nodeId} failed: ${run.error ?? 'unknown error'}`, now)
    return true
  }
  if ((run?.result as { outcome?: string } | null)?.outcome === 'migrated') {
    // Guarded by the node: a step retried after a crash does not count it twice.
    await deps.db('host_drains').where({ id: input.drainId, status: 'running', current_node_id: nodeId }).update({ nodes_moved: draining.drain.nodes_moved + 1, current_node_id: null, activity: null, updated_at: now })
  }
  return false
}

async function stop(deps: LifecycleDeps, input: HostDrainInput, host: Host, nodeId: string, reason: string, now: Date): Promise<Ended> {
  await deps.db.transaction(async (trx) => {
    if (!(await finishDrain(trx, input.drainId, { status: 'stopped', stopReason: reason, stoppedAtNodeId: nodeId }, now))) return
    await notifyRequester(trx, input.drainId, 'host_drain_stopped', `Drain of host ${host.name} stopped`, reason, host, now)
  })
  deps.logger.error({ host: host.name, host_id: host.id, node_id: nodeId, drain_id: input.drainId, reason }, 'host drain stopped; the host stays draining')
  return { end: 'stopped' }
}

/** The host has no live node: clean up what terminated nodes left, then cordon it. False when a node appeared meanwhile. */
async function completeDrain(deps: LifecycleDeps, input: HostDrainInput, now: Date): Promise<boolean> {
  const provider = providerFor(deps, 'ssh')
  await reconcileReservations({ db: deps.db, logger: deps.logger, destroy: (id) => provider.destroyHost(id), minAgeMs: 0 }, now, input.hostId)
  return deps.db.transaction(async (trx) => {
    const drain = await findDrain(trx, input.drainId)
    const host = await findHostById(trx, input.hostId)
    if (!drain || drain.status !== 'running' || !host) return true
    if (host.state !== 'draining') {
      await finishDrain(trx, drain.id, { status: 'cancelled' }, now)
      return true
    }
    if ((await countLiveNodesOnHost(trx, host.id)) > 0) return false
    if (!(await updateHostState(trx, host, nextHostState(host.state, 'drained', host.name), now))) throw new Error(`host ${host.name} changed meanwhile`)
    await finishDrain(trx, drain.id, { status: 'completed' }, now)
    await notifyRequester(trx, drain.id, 'host_drain_completed', `Host ${host.name} is drained`, `${drain.nodes_moved} node(s) moved off host ${host.name}; it is cordoned.`, host, now)
    deps.logger.info({ host: host.name, host_id: host.id, drain_id: drain.id, nodes_moved: drain.nodes_moved }, 'host drained and cordoned')
    return true
  })
}

async function notifyRequester(trx: Queryable, drainId: string, kind: 'host_drain_completed' | 'host_drain_stopped', title: string, body: string, host: Host, now: Date): Promise<void> {
  const drain = await findDrain(trx, drainId)
  if (!drain?.requested_by) return
  const user = (await trx('users').where({ id: drain.requested_by }).first('id')) as { id: string } | undefined
  if (!user) return
  await createNotification(
    trx,
    { userId: user.id, kind, title, body, data: { host_id: host.id, host_name: host.name, drain_id: drain.id, nodes_moved: drain.nodes_moved, stop_reason: drain.stop_reason } },
    now,
  )
}
