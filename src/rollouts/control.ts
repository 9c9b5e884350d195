/**
 * What an operator does to a rollout or a group (the API's action endpoints and the CLI):
 * start it, signal it, retry one node. Each checks the current status first and refuses with
 * 409 what the status tables do not allow (docs/rollouts.md); a signal is then handed to the
 * rollout's workflow, which acts on it between batches (spec: pause after the current batch,
 * cancel lets in-flight nodes finish).
 */
import type { Db } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import { sendSignal, startWorkflow } from '../workflows/index.js'
import { publishRolloutEvent, rolloutProgress } from './events.js'
import { checkGroupSignal, checkRolloutSignal, type GroupAction, type RolloutAction } from './signal-rules.js'
import { CONTROL_SIGNAL, GROUP_CONTROL_SIGNAL, GROUP_WORKFLOW, ROLLOUT_WORKFLOW, type ControlSignal, type GroupControlSignal } from './workflow-names.js'
import type { GroupSignal, RolloutSignal, RolloutStatus } from './states.js'
import {
  requireRollout,
  requireRolloutGroup,
  getRolloutNode,
  updateGroupStatus,
  updateRolloutNode,
  updateRolloutStatus,
  type RolloutGroupRecord,
  type RolloutNodeRecord,
  type RolloutRecord,
} from './store.js'

export interface ActionOptions {
  /** Who asks (the caller's user id); recorded with the signal. */
  by: string
  now?: Date
}

/** What an action answers: the rollout or group as it is now, and whether this call changed anything (docs/cli.md, "Repeats"). */
export type Signalled<T> = T & { changed: boolean }

/**
 * pending -> running (or -> scheduled when its scheduled_at is still ahead), and its workflow,
 * in one transaction. A component rollout of a group is started by its group. A running or
 * scheduled rollout is a repeat; one that has ended, or is paused, is refused.
 */
export async function startRollout(db: Db, rolloutId: string, options: ActionOptions): Promise<Signalled<RolloutRecord>> {
  const now = options.now ?? new Date()
  return rolloutRepeatIfLost(db, rolloutId, 'start', () => db.transaction(async (trx) => {
    const current = await requireRollout(trx, rolloutId)
    // Spec: start moves pending only. A scheduled rollout starts by itself at its time (even one
    // whose time has passed while no orchestrator ran): a second start is a repeat, never a second
    // workflow racing the first.
    if (checkRolloutSignal(current, 'start').kind === 'repeat') return { ...current, changed: false }
    const to: RolloutStatus = current.scheduled_at && current.scheduled_at.getTime() > now.getTime() ? 'scheduled' : 'running'
    const moved = await updateRolloutStatus(trx, rolloutId, to, { expectedVersion: current.version, now })
    await startWorkflow(trx, ROLLOUT_WORKFLOW, { rolloutId }, { key: rolloutId, now })
    if (to === 'running') {
      // rollout_started is notified once its workflow has planned the nodes (rollout-workflow.ts).
      await publishRolloutEvent(trx, 'started', rolloutProgress(moved), now)
    }
    return { ...moved, changed: true }
  }))
}

export async function signalRollout(db: Db, rolloutId: string, signal: RolloutSignal, options: ActionOptions): Promise<Signalled<RolloutRecord>> {
  const now = options.now ?? new Date()
  const current = await requireRollout(db, rolloutId)
  if (checkRolloutSignal(current, signal).kind === 'repeat') return { ...current, changed: false }
  if (signal === 'cancel' && (current.status === 'pending' || current.status === 'scheduled')) {
    return rolloutRepeatIfLost(db, rolloutId, signal, async () => ({ ...(await cancelBeforeStart(db, current, now)), changed: true }))
  }
  const payload: ControlSignal = { signal, by: options.by }
  await sendSignal(db, { name: ROLLOUT_WORKFLOW, key: rolloutId }, CONTROL_SIGNAL, payload, { now })
  return { ...current, changed: true }
}

/**
 * A rollout that has touched no node ends at once: cancelled, which frees its chain's active slot.
 * A scheduled one's workflow, asleep until the scheduled time, then finds it cancelled and ends.
 */
async function cancelBeforeStart(db: Db, current: RolloutRecord, now: Date): Promise<RolloutRecord> {
  return db.transaction(async (trx) => {
    const moved = await updateRolloutStatus(trx, current.id, 'cancelled', { expectedVersion: current.version, now })
    await publishRolloutEvent(trx, 'completed', rolloutProgress(moved), now)
    return moved
  })
}

/** A failed node of a running or paused rollout goes back to pending: the next batch takes it. */
export async function retryRolloutNode(db: Db, rolloutId: string, nodeId: string, options: ActionOptions): Promise<RolloutNodeRecord> {
  const now = options.now ?? new Date()
  return db.transaction(async (trx) => {
    const rollout = await requireRollout(trx, rolloutId)
    if (rollout.status !== 'running' && rollout.status !== 'paused') {
      throw new ConflictError(`cannot retry a node of rollout ${rollout.id}: it is ${rollout.status}`, 'nodes are retried while their rollout runs or is paused; for a finished rollout, create a new one with the same source version')
    }
    const node = await getRolloutNode(trx, rolloutId, nodeId)
    if (!node) throw new ConflictError(`node ${nodeId} is not part of rollout ${rolloutId}`, 'list its nodes: GET /api/v1/rollouts/{id}/nodes')
    if (node.status !== 'failed') throw new ConflictError(`node ${nodeId} of rollout ${rolloutId} is ${node.status}`, 'only a failed node can be retried')
    return updateRolloutNode(trx, rolloutId, nodeId, { status: 'pending', upgrade_phase: null, error_message: null, completed_at: null }, now)
  })
}

export async function startRolloutGroup(db: Db, groupId: string, options: ActionOptions): Promise<Signalled<RolloutGroupRecord>> {
  const now = options.now ?? new Date()
  return groupRepeatIfLost(db, groupId, 'start', () => db.transaction(async (trx) => {
    const current = await requireRolloutGroup(trx, groupId)
    if (checkGroupSignal(current, 'start').kind === 'repeat') return { ...current, changed: false }
    const moved = await updateGroupStatus(trx, groupId, 'running', { expectedVersion: current.version, now, fields: { current_component_index: 0 } })
    await startWorkflow(trx, GROUP_WORKFLOW, { groupId }, { key: groupId, now })
    return { ...moved, changed: true }
  }))
}

export async function signalRolloutGroup(db: Db, groupId: string, signal: GroupSignal, options: ActionOptions): Promise<Signalled<RolloutGroupRecord>> {
  const now = options.now ?? new Date()
  const current = await requireRolloutGroup(db, groupId)
  if (checkGroupSignal(current, signal).kind === 'repeat') return { ...current, changed: false }
  // A group never started has no workflow to tell: it is cancelled here (the group table allows it).
  if (current.status === 'pending') {
    return groupRepeatIfLost(db, groupId, signal, async () => ({ ...(await updateGroupStatus(db, groupId, 'cancelled', { expectedVersion: current.version, now })), changed: true }))
  }
  const payload: GroupControlSignal = { signal, by: options.by }
  await sendSignal(db, { name: GROUP_WORKFLOW, key: groupId }, GROUP_CONTROL_SIGNAL, payload, { now })
  return { ...current, changed: true }
}

/*
 * The status check above reads without a lock: two callers at once (Postgres) both find the
 * rollout pending, and the loser's versioned write fails. Judged again on the row as the winner
 * left it, the loser's call is what it would have been a moment later: a repeat answers
 * `changed: false`; anything else stays refused. The same as incidents' moveIncident.
 */
async function repeatIfLost<T>(move: () => Promise<Signalled<T>>, readAgain: () => Promise<T>, isRepeat: (fresh: T) => boolean): Promise<Signalled<T>> {
  try {
    return await move()
  } catch (err) {
    if (!(err instanceof ConflictError)) throw err
    const fresh = await readAgain()
    if (isRepeat(fresh)) return { ...fresh, changed: false }
    throw err
  }
}

function rolloutRepeatIfLost(db: Db, rolloutId: string, action: RolloutAction, move: () => Promise<Signalled<RolloutRecord>>): Promise<Signalled<RolloutRecord>> {
  return repeatIfLost(move, () => requireRollout(db, rolloutId), (fresh) => checkRolloutSignal(fresh, action).kind === 'repeat')
}

function groupRepeatIfLost(db: Db, groupId: string, action: GroupAction, move: () => Promise<Signalled<RolloutGroupRecord>>): Promise<Signalled<RolloutGroupRecord>> {
  return repeatIfLost(move, () => requireRolloutGroup(db, groupId), (fresh) => checkGroupSignal(fresh, action).kind === 'repeat')
}
