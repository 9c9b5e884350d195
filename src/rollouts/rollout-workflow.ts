/**
 * The `rollout` workflow (spec: "Rollout execution rules"; docs/rollouts.md), key = rollout id.
 *
 * plan (eligible nodes, batch_index) -> for each batch: the operator's signals, then the batch's
 * nodes upgraded in parallel (src/rollouts/node-upgrade.ts), then the counters; a canary batch is
 * observed for 2 x health_wait_duration and, for a breaking migration, waits for approve_canary;
 * failed/attempted above failure_threshold auto-pauses unless forced -> completed, or failed when
 * any node failed.
 *
 * Signals (`control`, payload {signal, by}) are taken between batches: pause (after the current
 * batch), resume, cancel (no new batches), force, approve_canary, rollback (pause, every
 * succeeded node back to its previous version, batch by batch in reverse, then rolled_back).
 * A batch is one durable step: after a crash it runs again, and each node resumes where its own
 * record says (finished ones are left alone).
 */
import type { Db } from '../db/knex.js'
import { sendSignal, StepFailedError, type WorkflowContext, type WorkflowRegistry } from '../workflows/index.js'
import { notifyOperator, publishRolloutEvent, rolloutProgress } from './events.js'
import { renderConfigChanges } from './manifests.js'
import { rpcHostOf } from '../provisioning/configure.js'
import { previousConfiguration, rollBackRolloutNodes, rpcPortOf } from './node-configuration.js'
import { rollbackStepTimeoutMs, upgradeNode, upgradeStep, type NodeUpgradeDeps, type UpgradeTarget } from './node-upgrade.js'
import { assignBatches, eligibleNodeIds } from './planning.js'
import type { RolloutStatus } from './states.js'
import { CONTROL_SIGNAL, GROUP_CONTROL_SIGNAL, GROUP_WORKFLOW, ROLLOUT_WORKFLOW, type ControlSignal, type GroupControlSignal } from './workflow-names.js'
import {
  countRolloutNodes,
  insertRolloutNodes,
  listRolloutNodes,
  requireRollout,
  updateRolloutFields,
  updateRolloutStatus,
  type RolloutFields,
  type RolloutNodeRecord,
  type RolloutRecord,
} from './store.js'

export { CONTROL_SIGNAL, ROLLOUT_WORKFLOW, type ControlSignal } from './workflow-names.js'

export interface RolloutWorkflowInput {
  rolloutId: string
}

export interface RolloutWorkflowResult {
  rollout_id: string
  status: RolloutStatus
  succeeded_nodes: number
  failed_nodes: number
  total_nodes: number
}

export type RolloutDeps = NodeUpgradeDeps

type Decision = 'continue' | 'cancelled' | 'rolled_back'

export function registerRolloutWorkflow(registry: WorkflowRegistry, deps: RolloutDeps): WorkflowRegistry {
  return registry.register(ROLLOUT_WORKFLOW, rolloutWorkflow(deps))
}

export function rolloutWorkflow(deps: RolloutDeps) {
  return async (ctx: WorkflowContext, input: RolloutWorkflowInput): Promise<RolloutWorkflowResult> => {
    try {
      return await runRollout(ctx, deps, input.rolloutId)
    } catch (err) {
      // A step out of retries: the rollout must not stay `running` with nothing driving it.
      if (!(err instanceof StepFailedError)) throw err
      await ctx.step('failed', () => failRollout(deps, input.rolloutId, err.message))
      return result(deps.db, input.rolloutId)
    }
  }
}

async function runRollout(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string): Promise<RolloutWorkflowResult> {
  const first = await ctx.step('load', async () => {
    const r = await requireRollout(deps.db, rolloutId)
    return { status: r.status, scheduled_at: r.scheduled_at?.toISOString() ?? null }
  })
  // Cancelled before its workflow first ran (control.ts cancels a scheduled rollout at once).
  if (first.status === 'cancelled') return result(deps.db, rolloutId)
  if (first.status === 'scheduled' && first.scheduled_at) {
    await ctx.sleepUntil(new Date(first.scheduled_at))
    const started = await ctx.step('scheduled-start', async () => {
      // Cancelled while it waited (control.ts): nothing to start.
      if ((await requireRollout(deps.db, rolloutId)).status === 'cancelled') return 'cancelled'
      return move(deps, rolloutId, 'running', {}, { event: 'started' })
    })
    if (started === 'cancelled') return result(deps.db, rolloutId)
  }
  const plan = await ctx.step('plan', () => planRollout(deps, rolloutId))

  let batch = 0
  for (;;) {
    const decision = await betweenBatches(ctx, deps, rolloutId)
    if (decision !== 'continue') return result(deps.db, rolloutId)
    const work = await ctx.step('next-batch', () => nextBatch(deps.db, rolloutId, batch, plan.batchCount))
    if (work === null) break
    batch = work
    await ctx.step('batch', (step) => runBatch(deps, rolloutId, batch, () => step.heartbeat()), upgradeStep(batchTimeoutMs(deps, plan.healthWaitMs)))
    const counts = await ctx.step('count', () => recordProgress(deps, rolloutId, batch))

    if (batch === 0 && plan.canaryCount > 0) {
      const canary = await canaryGate(ctx, deps, rolloutId, plan, counts)
      if (canary !== 'continue') return result(deps.db, rolloutId)
    } else if (counts.overThreshold) {
      const decision = await pausedUntilDecision(ctx, deps, rolloutId, 'failure_threshold')
      if (decision !== 'continue') return result(deps.db, rolloutId)
    }
    batch += 1
  }

  await ctx.step('finish', () => finish(deps, rolloutId))
  return result(deps.db, rolloutId)
}

async function failRollout(deps: RolloutDeps, rolloutId: string, reason: string): Promise<RolloutStatus> {
  return deps.db.transaction(async (trx) => {
    const now = deps.now()
    const current = await requireRollout(trx, rolloutId)
    if (current.status !== 'running') return current.status
    const counts = await countRolloutNodes(trx, rolloutId)
    const failed = await updateRolloutStatus(trx, rolloutId, 'failed', { now, fields: { succeeded_nodes: counts.succeeded, failed_nodes: counts.failed, error_message: reason.slice(0, 2000) } })
    await announceChange(trx, failed, { event: 'completed', notify: 'rollout_failed' }, now)
    return failed.status
  })
}

function batchTimeoutMs(deps: RolloutDeps, healthWaitMs: number): number {
  // An upgrade command, its health validation, and a revert command if validation fails.
  return 2 * deps.commandTimeoutMs + healthWaitMs + 60_000
}

async function result(db: Db, rolloutId: string): Promise<RolloutWorkflowResult> {
  const r = await requireRollout(db, rolloutId)
  return { rollout_id: r.id, status: r.status, succeeded_nodes: r.succeeded_nodes, failed_nodes: r.failed_nodes, total_nodes: r.total_nodes }
}


type Announce = { event?: 'started' | 'progress' | 'completed'; notify?: Parameters<typeof notifyOperator>[1] }

/** A status move with its event and notification, in one transaction. */
async function move(deps: RolloutDeps, rolloutId: string, to: RolloutStatus, fields: RolloutFields, announce: Announce = {}): Promise<RolloutStatus> {
  return deps.db.transaction(async (trx) => {
    const now = deps.now()
    const moved = await updateRolloutStatus(trx, rolloutId, to, { now, fields })
    await announceChange(trx, moved, announce, now)
    return moved.status
  })
}

async function announceChange(trx: Parameters<typeof publishRolloutEvent>[0], r: RolloutRecord, announce: Announce, now: Date): Promise<void> {
  if (announce.event) await publishRolloutEvent(trx, announce.event, rolloutProgress(r), now)
  if (announce.notify) await notifyOperator(trx, announce.notify, r.created_by, rolloutProgress(r), now)
  // A group's component wakes its group when it ends or pauses: the group decides what follows.
  if (r.group_id && (announce.event === 'completed' || r.status === 'paused')) {
    const changed: GroupControlSignal = { signal: 'component_changed', by: 'rollout', rollout_id: r.id }
    await sendSignal(trx, { name: GROUP_WORKFLOW, key: r.group_id }, GROUP_CONTROL_SIGNAL, changed, { now })
  }
}

interface Plan {
  batchCount: number
  canaryCount: number
  healthWaitMs: number
  breaking: boolean
}

/** Resolves the eligible nodes and records them with their batch (once: a replay finds them). */
async function planRollout(deps: RolloutDeps, rolloutId: string): Promise<Plan> {
  return deps.db.transaction(async (trx) => {
    const r = await requireRollout(trx, rolloutId)
    const existing = await listRolloutNodes(trx, rolloutId)
    const breaking = r.migration_type === 'breaking'
    if (existing.length > 0 || r.batch_count !== null) {
      const canaryCount = r.strategy === 'canary' ? existing.filter((n) => n.batch_index === 0).length : 0
      return { batchCount: r.batch_count ?? 0, canaryCount, healthWaitMs: r.health_wait_duration_ms, breaking }
    }
    const ids = await eligibleNodeIds(trx, { chainProfileId: r.chain_profile_id, nodeType: r.node_type, sourceVersion: r.source_version })
    const plan = assignBatches(ids, { strategy: r.strategy, batchSize: r.batch_size, canarySize: r.canary_size, seed: r.id })
    const now = deps.now()
    await insertRolloutNodes(
      trx,
      rolloutId,
      plan.batches.flatMap((nodes, batch_index) => nodes.map((node_id) => ({ node_id, batch_index }))),
      now,
    )
    const updated = await updateRolloutFields(trx, rolloutId, { total_nodes: ids.length, batch_count: plan.batches.length, current_batch: null }, { now })
    await publishRolloutEvent(trx, 'progress', rolloutProgress(updated), now)
    // The operator's rollout_started waits for the plan, so that it says how many nodes it upgrades.
    await notifyOperator(trx, 'rollout_started', updated.created_by, rolloutProgress(updated), now)
    return { batchCount: plan.batches.length, canaryCount: plan.canaryCount, healthWaitMs: r.health_wait_duration_ms, breaking }
  })
}

/**
 * The batch to run next, at or after `from`: a planned batch, or past the plan the nodes an
 * operator retried (status pending again); null when nothing is left.
 */
async function nextBatch(db: Db, rolloutId: string, from: number, batchCount: number): Promise<number | null> {
  if (from < batchCount) return from
  const retried = (await db('rollout_nodes').where({ rollout_id: rolloutId, status: 'pending' }).first('id')) as { id: string } | undefined
  const unfinished = (await db('rollout_nodes').where({ rollout_id: rolloutId }).whereIn('status', ['in_progress', 'validating']).first('id')) as { id: string } | undefined
  return retried || unfinished ? from : null
}

function upgradeTarget(deps: RolloutDeps, r: RolloutRecord, node: RolloutNodeRecord, rpcPort: number, rpcHost: string): UpgradeTarget {
  const profile = deps.catalogue().profiles.get(r.chain_profile_id)
  const rendered =
    profile && r.manifest?.config_changes ? renderConfigChanges(profile, r.node_type, r.target_version, r.manifest.config_changes, { rpc_port: rpcPort, rpc_host: rpcHost, node_id: node.node_id }) : {}
  return {
    rolloutId: r.id,
    chainProfileId: r.chain_profile_id,
    binaryName: r.binary_name,
    version: r.target_version,
    url: r.target_binary_url,
    checksum: r.target_binary_checksum,
    ...(rendered.config_files ? { configFiles: rendered.config_files } : {}),
    ...(rendered.config_version ? { configVersion: rendered.config_version } : {}),
    ...(rendered.run ? { run: rendered.run } : {}),
    healthWaitMs: r.health_wait_duration_ms,
  }
}

/**
 * One batch: its planned nodes, the ones retried since (pending, planned earlier), and any left in
 * progress by a crash, all in parallel. Each node's own record says what is left to do.
 */
async function runBatch(deps: RolloutDeps, rolloutId: string, batch: number, heartbeat: () => void): Promise<{ nodes: number }> {
  const r = await requireRollout(deps.db, rolloutId)
  await updateRolloutFields(deps.db, rolloutId, { current_batch: batch }, { now: deps.now() })
  const nodes = (await listRolloutNodes(deps.db, rolloutId)).filter((n) => n.batch_index <= batch && ['pending', 'in_progress', 'validating'].includes(n.status))
  await Promise.all(
    nodes.map(async (n) => {
      const rpcPort = await rpcPortOf(deps.db, n.node_id)
      const target = { ...upgradeTarget(deps, r, n, rpcPort, await rpcHostOf(deps.db, n.node_id)), revert: await previousConfiguration(deps, r, n.node_id, r.source_version, rpcPort) }
      return upgradeNode(deps, target, { id: n.id, nodeId: n.node_id }, heartbeat)
    }),
  )
  return { nodes: nodes.length }
}

interface Counts {
  succeeded: number
  failed: number
  canaryFailed: boolean
  overThreshold: boolean
}

async function recordProgress(deps: RolloutDeps, rolloutId: string, batch: number): Promise<Counts> {
  return deps.db.transaction(async (trx) => {
    const now = deps.now()
    const counts = await countRolloutNodes(trx, rolloutId)
    const r = await updateRolloutFields(trx, rolloutId, { succeeded_nodes: counts.succeeded, failed_nodes: counts.failed }, { now })
    await publishRolloutEvent(trx, 'progress', rolloutProgress(r), now)
    const attempted = counts.succeeded + counts.failed
    const canaryFailed = batch === 0 && r.strategy === 'canary' && (await listRolloutNodes(trx, rolloutId)).some((n) => n.batch_index === 0 && n.status === 'failed')
    return { succeeded: counts.succeeded, failed: counts.failed, canaryFailed, overThreshold: !r.forced && attempted > 0 && counts.failed / attempted > r.failure_threshold }
  })
}

/**
 * The canary batch (spec: "canary_size random nodes first, then 2x health_wait_duration
 * observation, then rolling; canary failure auto-pauses"; a breaking migration's canary blocks
 * until approve_canary).
 */
async function canaryGate(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string, plan: Plan, counts: Counts): Promise<Decision> {
  let paused = false
  let decision: Decision = 'continue'
  if (counts.canaryFailed) {
    paused = true
    decision = await pausedUntilDecision(ctx, deps, rolloutId, 'canary_failed')
  } else {
    await ctx.sleep(2 * plan.healthWaitMs)
    const healthy = await ctx.step('canary-observed', () => canaryStillHealthy(deps.db, rolloutId))
    if (!healthy.ok) {
      await ctx.step('canary-unhealthy', () => updateRolloutFields(deps.db, rolloutId, { error_message: healthy.reason }, { now: deps.now() }).then(() => true))
      paused = true
      decision = await pausedUntilDecision(ctx, deps, rolloutId, 'canary_failed')
    }
  }
  if (decision !== 'continue' || !plan.breaking) return decision
  if (paused) {
    // Resuming after a failed canary is not an approval: a breaking migration still waits for one.
    // A run resumed before that rule (its journal goes on into the batches) keeps its course:
    // this journaled check is what tells the two apart on replay.
    const goneOn = await ctx.step('canary-resumed-fleet-started', () => fleetStarted(deps.db, rolloutId))
    if (goneOn) return 'continue'
  }
  return awaitApproval(ctx, deps, rolloutId)
}

async function awaitApproval(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string): Promise<Decision> {
  await ctx.step('await-approval', () =>
    deps.db.transaction(async (trx) => {
      const now = deps.now()
      const r = await updateRolloutFields(trx, rolloutId, { awaiting: 'approve_canary' }, { now })
      await publishRolloutEvent(trx, 'progress', rolloutProgress(r), now)
      return true
    }),
  )
  for (;;) {
    const control = await ctx.waitForSignal<ControlSignal>(CONTROL_SIGNAL)
    if (!control) continue
    if (control.signal === 'approve_canary') {
      await ctx.step('approved', () => updateRolloutFields(deps.db, rolloutId, { awaiting: null }, { now: deps.now() }).then(() => control.by))
      return 'continue'
    }
    if (control.signal === 'cancel') return cancel(ctx, deps, rolloutId)
    if (control.signal === 'rollback') return rollback(ctx, deps, rolloutId)
    if (control.signal === 'force') {
      // Not an approval: it overrides the failure threshold for the batches after it.
      await ctx.step('forced', () => updateRolloutFields(deps.db, rolloutId, { forced: true }, { now: deps.now() }).then(() => control.by))
    }
    if (control.signal === 'pause') {
      const decision = await pausedUntilDecision(ctx, deps, rolloutId, 'operator')
      if (decision !== 'continue') return decision
    }
  }
}

/** Whether any node after the canary batch has been touched. */
async function fleetStarted(db: Db, rolloutId: string): Promise<boolean> {
  const touched = (await db('rollout_nodes').where({ rollout_id: rolloutId }).where('batch_index', '>', 0).whereNot({ status: 'pending' }).first('id')) as { id: string } | undefined
  return touched !== undefined
}

/** After the observation: no canary node down, failed, critical or stalled. */
async function canaryStillHealthy(db: Db, rolloutId: string): Promise<{ ok: boolean; reason: string | null }> {
  const rows = (await db('rollout_nodes')
    .join('nodes', 'nodes.id', 'rollout_nodes.node_id')
    .where({ 'rollout_nodes.rollout_id': rolloutId, 'rollout_nodes.batch_index': 0, 'rollout_nodes.status': 'succeeded' })
    .select('nodes.id', 'nodes.state', 'nodes.application_health', 'nodes.sync_status')) as Array<{ id: string; state: string; application_health: string; sync_status: string }>
  const bad = rows.find((n) => n.state === 'down' || n.state === 'failed' || n.application_health === 'critical' || n.sync_status === 'stalled')
  return bad ? { ok: false, reason: `canary node ${bad.id} is ${bad.state}, application health ${bad.application_health}, sync ${bad.sync_status} after the observation` } : { ok: true, reason: null }
}

/** The operator's signals that arrived during the last batch, in order. */
async function betweenBatches(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string): Promise<Decision> {
  for (;;) {
    const control = await ctx.waitForSignal<ControlSignal>(CONTROL_SIGNAL, { timeoutMs: 0 })
    if (!control) return 'continue'
    if (control.signal === 'pause') {
      const decision = await pausedUntilDecision(ctx, deps, rolloutId, 'operator')
      if (decision !== 'continue') return decision
    } else if (control.signal === 'cancel') {
      return cancel(ctx, deps, rolloutId)
    } else if (control.signal === 'rollback') {
      return rollback(ctx, deps, rolloutId)
    } else if (control.signal === 'force') {
      await ctx.step('forced', () => updateRolloutFields(deps.db, rolloutId, { forced: true }, { now: deps.now() }).then(() => control.by))
    }
    // resume and approve_canary mean nothing while running between batches.
  }
}

/** Paused (by the operator, the failure threshold or a failed canary) until resume, force, cancel or rollback. */
async function pausedUntilDecision(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string, reason: string): Promise<Decision> {
  await ctx.step('pause', () => move(deps, rolloutId, 'paused', { pause_reason: reason }, { event: 'progress', notify: 'rollout_paused' }))
  for (;;) {
    const control = await ctx.waitForSignal<ControlSignal>(CONTROL_SIGNAL)
    if (!control) continue
    switch (control.signal) {
      case 'resume':
        await ctx.step('resume', () => move(deps, rolloutId, 'running', {}, { event: 'progress' }))
        return 'continue'
      case 'force':
        await ctx.step('resume-forced', () => move(deps, rolloutId, 'running', { forced: true }, { event: 'progress' }))
        return 'continue'
      case 'cancel':
        return cancel(ctx, deps, rolloutId)
      case 'rollback':
        return rollback(ctx, deps, rolloutId)
      default:
        break
    }
  }
}

async function cancel(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string): Promise<Decision> {
  await ctx.step('cancel', () => move(deps, rolloutId, 'cancelled', { awaiting: null }, { event: 'completed' }))
  return 'cancelled'
}

/**
 * Spec: "Full rollback pauses the rollout, upgrades every succeeded node back with target and
 * source swapped, then sets rolled_back" — the latest batches first.
 */
async function rollback(ctx: WorkflowContext, deps: RolloutDeps, rolloutId: string): Promise<Decision> {
  const batches = await ctx.step('rollback-begin', () =>
    deps.db.transaction(async (trx) => {
      const now = deps.now()
      const current = await requireRollout(trx, rolloutId)
      const paused =
        current.status === 'running'
          ? await updateRolloutStatus(trx, rolloutId, 'paused', { now, fields: { pause_reason: 'rollback', awaiting: null } })
          : await updateRolloutFields(trx, rolloutId, { pause_reason: 'rollback', awaiting: null }, { now })
      await announceChange(trx, paused, { event: 'progress', notify: 'rollback_initiated' }, now)
      const succeeded = (await listRolloutNodes(trx, rolloutId)).filter((n) => n.status === 'succeeded')
      return [...new Set(succeeded.map((n) => n.batch_index))].sort((a, b) => b - a)
    }),
  )
  // Read outside a step: a rollout's health wait never changes once it is created.
  const timeoutMs = rollbackStepTimeoutMs(deps.commandTimeoutMs, (await requireRollout(deps.db, rolloutId)).health_wait_duration_ms)
  for (const batch of batches) {
    await ctx.step('rollback-batch', (step) => rollBackBatch(deps, rolloutId, batch, () => step.heartbeat()), upgradeStep(timeoutMs))
  }
  await ctx.step('rollback-end', () =>
    deps.db.transaction(async (trx) => {
      const now = deps.now()
      const counts = await countRolloutNodes(trx, rolloutId)
      const stuck = counts.succeeded
      const done = await updateRolloutStatus(trx, rolloutId, 'rolled_back', {
        now,
        fields: { succeeded_nodes: counts.succeeded, failed_nodes: counts.failed, ...(stuck > 0 ? { error_message: `${stuck} node(s) could not be rolled back and still run the target version` } : {}) },
      })
      await announceChange(trx, done, { event: 'completed', notify: 'rollback_completed' }, now)
      return done.status
    }),
  )
  return 'rolled_back'
}

async function rollBackBatch(deps: RolloutDeps, rolloutId: string, batch: number, heartbeat: () => void): Promise<{ nodes: number }> {
  const r = await requireRollout(deps.db, rolloutId)
  const nodes = (await listRolloutNodes(deps.db, rolloutId)).filter((n) => n.batch_index === batch && ['succeeded', 'in_progress', 'validating'].includes(n.status))
  await rollBackRolloutNodes(deps, r, nodes, heartbeat)
  return { nodes: nodes.length }
}

async function finish(deps: RolloutDeps, rolloutId: string): Promise<RolloutStatus> {
  return deps.db.transaction(async (trx) => {
    const now = deps.now()
    const counts = await countRolloutNodes(trx, rolloutId)
    const to: RolloutStatus = counts.failed > 0 ? 'failed' : 'completed'
    const done = await updateRolloutStatus(trx, rolloutId, to, {
      now,
      fields: {
        succeeded_nodes: counts.succeeded,
        failed_nodes: counts.failed,
        current_batch: null,
        ...(counts.failed > 0 ? { error_message: `${counts.failed} node(s) failed; create a new rollout with the same source version to retry them` } : {}),
      },
    })
    await announceChange(trx, done, { event: 'completed', notify: to === 'failed' ? 'rollout_failed' : 'rollout_completed' }, now)
    return done.status
  })
}
