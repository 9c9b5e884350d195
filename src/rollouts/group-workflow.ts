/**
 * The `rollout-group` workflow (spec: "A group runs one rollout per component in declared order,
 * with a health gate (all upgraded nodes healthy) between components"; docs/rollouts.md), key =
 * group id.
 *
 * For each component: the operator's signals; the component's rollout created (group_id,
 * component_index) and started; the group waits for it (the rollout wakes it when it ends); then
 * the health gate. A component that does not complete (or fails its gate) is decided by the
 * failure policy: `partial_ok` -> group `partial`; `rollback_all` -> the failing component's
 * upgraded nodes, then the components already done, are rolled back node by node, latest
 * first, group `rolled_back`; `manual` -> the group pauses for the operator (resume goes on with
 * the next component, skip likewise, cancel ends).
 *
 * The operator's skip or cancel of a running component is not a failure: the component's rollout
 * is cancelled (its in-flight nodes finish), and once it has ended the group goes on with the
 * next component (skip) or ends `cancelled` (cancel); the failure policy does not run.
 *
 * A component's source version is what the group's nodes run when it starts (one binary version
 * is tracked per node: docs/rollouts.md, "Groups").
 */
import type { Db, Queryable } from '../db/knex.js'
import { sendSignal, startWorkflow, StepFailedError, type WorkflowContext, type WorkflowRegistry } from '../workflows/index.js'
import { componentRollout } from './create.js'
import { publishRolloutEvent, rolloutProgress } from './events.js'
import { rollBackRolloutNodes } from './node-configuration.js'
import { rollbackStepTimeoutMs, upgradeStep, type NodeUpgradeDeps } from './node-upgrade.js'
import { UPGRADEABLE_STATES } from './planning.js'
import type { RolloutGroupStatus, RolloutStatus } from './states.js'
import {
  insertRollout,
  isTerminalRollout,
  listGroupRollouts,
  listRolloutNodes,
  requireRollout,
  requireRolloutGroup,
  updateGroupFields,
  updateGroupStatus,
  updateRolloutStatus,
  type GroupFields,
  type RolloutGroupRecord,
} from './store.js'
import { CONTROL_SIGNAL, GROUP_CONTROL_SIGNAL, GROUP_WORKFLOW, ROLLOUT_WORKFLOW, type ControlSignal, type GroupControlSignal } from './workflow-names.js'

export { GROUP_CONTROL_SIGNAL, GROUP_WORKFLOW, type GroupControlSignal } from './workflow-names.js'

export interface GroupWorkflowInput {
  groupId: string
}

export interface GroupWorkflowResult {
  group_id: string
  status: RolloutGroupStatus
  components: Array<{ index: number; rollout_id: string | null; status: RolloutStatus | 'skipped' | 'not_started' }>
}

/** How often a health gate looks at the component's nodes: a quarter of the health wait, between half a second and 5 s. */
function gatePollMs(healthWaitMs: number): number {
  return Math.min(5_000, Math.max(500, Math.floor(healthWaitMs / 4)))
}

export function registerGroupWorkflow(registry: WorkflowRegistry, deps: NodeUpgradeDeps): WorkflowRegistry {
  return registry.register(GROUP_WORKFLOW, groupWorkflow(deps))
}

type Outcome = 'next' | 'stop'

export function groupWorkflow(deps: NodeUpgradeDeps) {
  return async (ctx: WorkflowContext, input: GroupWorkflowInput): Promise<GroupWorkflowResult> => {
    const { groupId } = input
    try {
      const group = await ctx.step('load', async () => {
        const g = await requireRolloutGroup(deps.db, groupId)
        return { components: g.component_order.length, policy: g.failure_policy, healthWaitMs: g.health_wait_duration_ms }
      })
      const done: number[] = []
      for (let index = 0; index < group.components; index++) {
        const between = await operatorSignals(ctx, deps, groupId)
        if (between === 'stop') return summary(deps.db, groupId)
        if (between === 'skip') {
          await ctx.step('skip', () => noteSkipped(deps, groupId, index))
          continue
        }
        const rolloutId = await ctx.step('component', () => startComponent(deps, groupId, index))
        if (rolloutId === null) {
          // Nothing to upgrade for this component (no node runs another version).
          continue
        }
        const { status, operator } = await awaitComponent(ctx, deps, groupId, rolloutId, 'or-stopped')
        if (operator === 'cancel') {
          await ctx.step('cancel', () => cancelGroup(deps, groupId))
          return summary(deps.db, groupId)
        }
        if (operator === 'skip') {
          // Nodes it upgraded before it stopped were upgraded by the group: rollback_all undoes them too.
          done.push(index)
          await ctx.step('skip', () => skipRunning(deps, groupId, index))
          // The gate still stands between components (the next one plans on healthy nodes, and a
          // node just upgraded is syncing), but a skipped component's gate decides nothing.
          await healthGate(ctx, deps, rolloutId, group.healthWaitMs)
          continue
        }
        const gate =
          status === 'completed'
            ? await healthGate(ctx, deps, rolloutId, group.healthWaitMs)
            : { ok: false, reason: status === 'paused' ? `component ${index} stopped for its failures (paused)` : `component ${index} ended ${status}` }
        if (gate.ok) {
          done.push(index)
          continue
        }
        const outcome = await onComponentFailure(ctx, deps, groupId, group.policy, done, { index, rolloutId, paused: status === 'paused' }, gate.reason ?? 'failed')
        if (outcome === 'stop') return summary(deps.db, groupId)
      }
      await ctx.step('finish', () => moveGroup(deps, groupId, 'completed', { current_component_index: null }))
      return summary(deps.db, groupId)
    } catch (err) {
      if (!(err instanceof StepFailedError)) throw err
      await ctx.step('failed', () => failGroup(deps, groupId, err.message))
      return summary(deps.db, groupId)
    }
  }
}

async function moveGroup(deps: NodeUpgradeDeps, groupId: string, to: RolloutGroupStatus, fields: GroupFields = {}): Promise<RolloutGroupStatus> {
  const moved = await updateGroupStatus(deps.db, groupId, to, { now: deps.now(), fields })
  return moved.status
}

async function failGroup(deps: NodeUpgradeDeps, groupId: string, reason: string): Promise<RolloutGroupStatus> {
  const g = await requireRolloutGroup(deps.db, groupId)
  if (g.status !== 'running' && g.status !== 'paused') return g.status
  return moveGroup(deps, groupId, 'failed', { error_message: reason.slice(0, 2000) })
}

/** The operator's cancel, taken once the running component has ended. */
async function cancelGroup(deps: NodeUpgradeDeps, groupId: string): Promise<RolloutGroupStatus> {
  const g = await requireRolloutGroup(deps.db, groupId)
  if (g.status !== 'running' && g.status !== 'paused') return g.status
  return moveGroup(deps, groupId, 'cancelled')
}

/** The operator's skip of the running component, taken once it has ended: on with the next one. */
async function skipRunning(deps: NodeUpgradeDeps, groupId: string, index: number): Promise<number> {
  const g = await requireRolloutGroup(deps.db, groupId)
  // A group paused by the operator before the skip goes on too (as a skip from a pause does).
  if (g.status === 'paused') await updateGroupStatus(deps.db, groupId, 'running', { now: deps.now(), fields: { current_component_index: index + 1 } })
  else await updateGroupFields(deps.db, groupId, { current_component_index: index + 1 }, { now: deps.now() })
  return index
}

async function summary(db: Db, groupId: string): Promise<GroupWorkflowResult> {
  const g = await requireRolloutGroup(db, groupId)
  const rollouts = await listGroupRollouts(db, groupId)
  return {
    group_id: g.id,
    status: g.status,
    components: g.component_order.map((_, index) => {
      const r = rollouts.find((x) => x.component_index === index)
      return { index, rollout_id: r?.id ?? null, status: r?.status ?? 'not_started' }
    }),
  }
}

/** Signals between components: pause waits for resume / cancel / skip; skip skips the next one. */
async function operatorSignals(ctx: WorkflowContext, deps: NodeUpgradeDeps, groupId: string): Promise<'go' | 'skip' | 'stop'> {
  let skip = false
  for (;;) {
    const control = await ctx.waitForSignal<GroupControlSignal>(GROUP_CONTROL_SIGNAL, { timeoutMs: 0 })
    if (!control) return skip ? 'skip' : 'go'
    if (control.signal === 'cancel') {
      await ctx.step('cancel', () => moveGroup(deps, groupId, 'cancelled'))
      return 'stop'
    }
    if (control.signal === 'skip') skip = true
    if (control.signal === 'pause') {
      const decision = await pausedGroup(ctx, deps, groupId, 'operator')
      if (decision === 'stop') return 'stop'
      if (decision === 'skip') skip = true
    }
  }
}

/** Paused until the operator resumes (or skips, or cancels). */
async function pausedGroup(ctx: WorkflowContext, deps: NodeUpgradeDeps, groupId: string, reason: string): Promise<'go' | 'skip' | 'stop'> {
  await ctx.step('pause', async () => {
    // The operator may have paused the group already (paused -> paused is no move): the reason is noted.
    const g = await requireRolloutGroup(deps.db, groupId)
    if (g.status !== 'paused') return moveGroup(deps, groupId, 'paused', { pause_reason: reason })
    await updateGroupFields(deps.db, groupId, { pause_reason: reason }, { now: deps.now() })
    return g.status
  })
  for (;;) {
    const control = await ctx.waitForSignal<GroupControlSignal>(GROUP_CONTROL_SIGNAL)
    if (!control) continue
    if (control.signal === 'resume' || control.signal === 'skip') {
      await ctx.step('resume', () => moveGroup(deps, groupId, 'running'))
      return control.signal === 'skip' ? 'skip' : 'go'
    }
    if (control.signal === 'cancel') {
      await ctx.step('cancel', () => moveGroup(deps, groupId, 'cancelled'))
      return 'stop'
    }
  }
}

async function noteSkipped(deps: NodeUpgradeDeps, groupId: string, index: number): Promise<number> {
  await updateGroupFields(deps.db, groupId, { current_component_index: index + 1 }, { now: deps.now() })
  return index
}

/**
 * Creates the component's rollout (once) and starts it; null when no node of the group runs a
 * version other than the component's (nothing to do).
 */
async function startComponent(deps: NodeUpgradeDeps, groupId: string, index: number): Promise<string | null> {
  return deps.db.transaction(async (trx) => {
    const now = deps.now()
    const g = await requireRolloutGroup(trx, groupId)
    const existing = (await listGroupRollouts(trx, groupId)).find((r) => r.component_index === index)
    if (existing) return existing.id
    const component = g.component_order[index]
    if (!component) throw new Error(`group ${groupId} has no component ${index}`)
    const source = await currentVersion(trx, g.chain_profile_id, component.node_type, component.version)
    await updateGroupFields(trx, groupId, { current_component_index: index }, { now })
    if (!source) return null
    const rollout = await insertRollout(trx, componentRollout(g, index, { sourceVersion: source, reason: `component ${index} of rollout group ${groupId}` }), now)
    const running = await updateRolloutStatus(trx, rollout.id, 'running', { now })
    await startWorkflow(trx, ROLLOUT_WORKFLOW, { rolloutId: rollout.id }, { key: rollout.id, now })
    // As a standalone rollout's start (control.ts, startRollout): the event; the notification follows its plan.
    await publishRolloutEvent(trx, 'started', rolloutProgress(running), now)
    return rollout.id
  })
}

/** The version most of the component's nodes (its node type, not the group's) run, other than the target. */
export async function currentVersion(db: Queryable, chainProfileId: string, nodeType: string, target: string): Promise<string | null> {
  const rows = (await db('nodes')
    .join('node_config_state', 'node_config_state.node_id', 'nodes.id')
    .join('subscriptions', 'subscriptions.id', 'nodes.subscription_id')
    .where({ 'nodes.chain_profile_id': chainProfileId, 'nodes.node_type': nodeType, 'subscriptions.status': 'active' })
    .whereIn('nodes.state', UPGRADEABLE_STATES)
    .whereNot('node_config_state.binary_version', target)
    .whereNotNull('node_config_state.binary_version')
    .groupBy('node_config_state.binary_version')
    .select('node_config_state.binary_version as version')
    .count({ n: '*' })
    .orderBy([{ column: 'n', order: 'desc' }, { column: 'version' }])) as Array<{ version: string; n: number | string }>
  return rows[0]?.version ?? null
}

/** A component paused for its failures (not by the operator) is stopped: the policy decides. */
const STOPPED_FOR_FAILURES = ['failure_threshold', 'canary_failed']

/** How a component's wait ended: its rollout's status, and the operator's skip or cancel if any. */
interface ComponentEnd {
  status: RolloutStatus
  /** The operator skipped or cancelled the running component: not a failure, no policy. */
  operator: 'skip' | 'cancel' | null
}

/**
 * Waits for the component's rollout to end (or, with `or-stopped`, to pause for its failures).
 * With `or-stopped` (the component running its course) the group's pause and resume are passed
 * on to it; skip and cancel send it `cancel` and are remembered, and the wait then lasts until
 * it has ended (its in-flight nodes finish), so the caller tells them apart from a failure. With
 * `ended` (the failure policy ending it) the group's signals are not acted on: the policy decides.
 */
async function awaitComponent(ctx: WorkflowContext, deps: NodeUpgradeDeps, groupId: string, rolloutId: string, until: 'ended' | 'or-stopped'): Promise<ComponentEnd> {
  let operator: ComponentEnd['operator'] = null
  for (;;) {
    // Once skipped or cancelled, a component paused for its failures is still on its way to
    // `cancelled`: it holds the chain's one active rollout until then.
    const waitUntil = operator ? 'ended' : until
    const status = await ctx.step('component-status', async () => {
      const r = await requireRollout(deps.db, rolloutId)
      const stopped = waitUntil === 'or-stopped' && r.status === 'paused' && STOPPED_FOR_FAILURES.includes(r.pause_reason ?? '')
      return isTerminalRollout(r.status) || stopped ? r.status : null
    })
    if (status) return { status, operator }
    const control = await ctx.waitForSignal<GroupControlSignal>(GROUP_CONTROL_SIGNAL, { timeoutMs: 600_000 })
    if (!control || control.signal === 'component_changed' || until === 'ended') continue
    if (control.signal === 'skip' || control.signal === 'cancel') {
      const first = operator === null
      // A cancel after a skip ends the group all the same; a skip after a cancel changes nothing.
      operator = operator === 'cancel' ? 'cancel' : control.signal
      if (first) await ctx.step('forward', () => forward(deps, groupId, rolloutId, control))
      continue
    }
    // Pause or resume of a component that is being skipped or cancelled: it is ending anyway.
    if (operator) continue
    await ctx.step('forward', () => forward(deps, groupId, rolloutId, control))
  }
}

/** Sends the component's rollout a signal and waits for it to end. */
async function endComponent(ctx: WorkflowContext, deps: NodeUpgradeDeps, groupId: string, rolloutId: string, signal: 'cancel' | 'rollback'): Promise<RolloutStatus> {
  await ctx.step('end-component', async () => {
    const r = await requireRollout(deps.db, rolloutId)
    if (isTerminalRollout(r.status)) return r.status
    const payload: ControlSignal = { signal, by: 'rollout-group' }
    await sendSignal(deps.db, { name: ROLLOUT_WORKFLOW, key: rolloutId }, CONTROL_SIGNAL, payload, { now: deps.now() })
    return signal
  })
  return (await awaitComponent(ctx, deps, groupId, rolloutId, 'ended')).status
}

/**
 * Passes the group's signal on to its running component: pause and resume as they are (the group
 * follows), skip and cancel as `cancel` (the group moves once the component has ended).
 */
async function forward(deps: NodeUpgradeDeps, groupId: string, rolloutId: string, control: Exclude<GroupControlSignal, { signal: 'component_changed' }>): Promise<string> {
  const now = deps.now()
  const rollout = await requireRollout(deps.db, rolloutId)
  const signal: ControlSignal['signal'] | null =
    control.signal === 'pause' ? 'pause' : control.signal === 'resume' ? 'resume' : control.signal === 'cancel' || control.signal === 'skip' ? 'cancel' : null
  if (!signal || isTerminalRollout(rollout.status)) return 'ignored'
  const payload: ControlSignal = { signal, by: control.by }
  await sendSignal(deps.db, { name: ROLLOUT_WORKFLOW, key: rolloutId }, CONTROL_SIGNAL, payload, { now })
  const group = await requireRolloutGroup(deps.db, groupId)
  if (control.signal === 'pause' && group.status === 'running') await updateGroupStatus(deps.db, groupId, 'paused', { now, fields: { pause_reason: 'operator' } })
  if (control.signal === 'resume' && group.status === 'paused') await updateGroupStatus(deps.db, groupId, 'running', { now })
  return signal
}

/** Spec: "a health gate (all upgraded nodes healthy) between components". */
async function healthGate(ctx: WorkflowContext, deps: NodeUpgradeDeps, rolloutId: string, healthWaitMs: number): Promise<{ ok: boolean; reason: string | null }> {
  const deadline = await ctx.step('gate-deadline', async () => deps.now().getTime() + Math.max(healthWaitMs, 60_000) * 2)
  for (;;) {
    const state = await ctx.step('gate', async () => {
      const nodes = (await listRolloutNodes(deps.db, rolloutId)).filter((n) => n.status === 'succeeded')
      if (nodes.length === 0) return { ok: true, reason: null }
      const rows = (await deps.db('nodes').whereIn('id', nodes.map((n) => n.node_id)).select('id', 'state')) as Array<{ id: string; state: string }>
      const waiting = rows.filter((r) => r.state !== 'healthy')
      if (waiting.length === 0) return { ok: true, reason: null }
      return { ok: false, reason: `${waiting.length} upgraded node(s) not healthy yet (${waiting.slice(0, 3).map((w) => `${w.id}: ${w.state}`).join(', ')})` }
    })
    if (state.ok) return state
    const now = await ctx.now()
    if (now.getTime() >= deadline) return { ok: false, reason: `health gate: ${state.reason ?? ''}` }
    await ctx.sleep(gatePollMs(healthWaitMs))
  }
}

interface FailedComponent {
  index: number
  rolloutId: string
  /** Stopped for its failures but not ended: it still holds the chain's one active rollout. */
  paused: boolean
}

/** Spec: the failure_policy decides. */
async function onComponentFailure(ctx: WorkflowContext, deps: NodeUpgradeDeps, groupId: string, policy: string, done: number[], failed: FailedComponent, reason: string): Promise<Outcome> {
  if (policy === 'partial_ok') {
    if (failed.paused) await endComponent(ctx, deps, groupId, failed.rolloutId, 'cancel')
    await ctx.step('partial', () => moveGroup(deps, groupId, 'partial', { error_message: reason }))
    return 'stop'
  }
  if (policy === 'rollback_all') {
    // The failing component first (its own upgraded nodes), then the finished ones, latest first.
    // A stopped component still runs: its own rollback does it (-> rolled_back). One that ended
    // (failed below its threshold, or completed but failed the gate) has its succeeded nodes
    // rolled back here, as a finished component's; its status stays what it ended with.
    // Read outside a step: a group's health wait never changes once it is created.
    const timeoutMs = rollbackStepTimeoutMs(deps.commandTimeoutMs, (await requireRolloutGroup(deps.db, groupId)).health_wait_duration_ms)
    if (failed.paused) await endComponent(ctx, deps, groupId, failed.rolloutId, 'rollback')
    else await ctx.step('rollback-component', (step) => rollBackComponent(deps, groupId, failed.index, () => step.heartbeat()), upgradeStep(timeoutMs))
    for (const index of [...done].reverse()) {
      await ctx.step('rollback-component', (step) => rollBackComponent(deps, groupId, index, () => step.heartbeat()), upgradeStep(timeoutMs))
    }
    await ctx.step('rolled-back', () => moveGroup(deps, groupId, 'rolled_back', { error_message: reason }))
    return 'stop'
  }
  // manual: the operator decides. Resume or skip goes on with the next component (a stopped
  // component is cancelled first: it holds the chain's one active rollout); cancel ends both.
  await ctx.step('manual', () => updateGroupFields(deps.db, groupId, { error_message: reason }, { now: deps.now() }).then(() => reason))
  const decision = await pausedGroup(ctx, deps, groupId, 'component_failed')
  if (failed.paused) await endComponent(ctx, deps, groupId, failed.rolloutId, 'cancel')
  return decision === 'stop' ? 'stop' : 'next'
}

/** Every node a completed component upgraded goes back to its previous version. */
async function rollBackComponent(deps: NodeUpgradeDeps, groupId: string, index: number, heartbeat: () => void): Promise<number> {
  const rollout = (await listGroupRollouts(deps.db, groupId)).find((r) => r.component_index === index)
  if (!rollout) return 0
  const nodes = (await listRolloutNodes(deps.db, rollout.id)).filter((n) => n.status === 'succeeded' || n.status === 'in_progress' || n.status === 'validating')
  await rollBackRolloutNodes(deps, rollout, nodes, heartbeat)
  return nodes.length
}
