/**
 * Upgrading one node of a rollout (spec: "Per node"): pre-check (node exists, state upgradeable,
 * subscription active); `maintenance`; the upgrade command to the agent, its progress mirrored
 * into `upgrade_phase`; `binary_version` written; health validation for health_wait_duration;
 * `syncing`; succeeded.
 *
 * When it fails:
 * - the agent's upgrade failed and it undid its actions (`rolled_back`): the node runs its old
 *   version again and goes back to `syncing`; the rollout node is failed;
 * - the upgrade succeeded but the node fails validation: the control plane sends the upgrade
 *   back to the previous version (`rollbacking`, then `rolled_back`), node to `syncing`, failed;
 * - undoing failed (`failed_rollback`, or no answer from the agent): the node is forced to
 *   `degraded` (the transition table has no maintenance -> degraded: this is compensation) and a
 *   critical incident is raised; a person has to look at it.
 *
 * Every step is idempotent: the rollout workflow re-runs a batch after a crash, and a node whose
 * rollout node is already finished is left alone, one in progress is resumed (the command key is
 * per attempt, so the agent's command is found again, not sent twice).
 */
import type { ChainCatalogue } from '../config/chains.js'
import { DEFAULT_HEALTH_POLICY } from '../config/health-policy.js'
import { awaitCommand, cancelCommand, enqueueCommand, type AgentCommand } from '../agent-gateway/commands.js'
import { upgradeResult, type ConfigFile, type RunSpec, type UpgradePhase } from '../agent-gateway/protocol.js'
import { storedSignature } from '../artifacts/store.js'
import { lockRow } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import { raiseUpgradeFailureIncident } from '../health/incident-upgrade.js'
import type { Logger } from '../log.js'
import { applyHealthUpdate, forceNodeState } from '../nodes/health-state-machine.js'
import { findNode } from '../nodes/node-store.js'
import { writeConfigState } from '../provisioning/configure.js'
import type { StepOptions } from '../workflows/index.js'
import { publishNodeUpgradeEvent, type NodeUpgradeEvent } from './events.js'
import { validateNodeHealth } from './health-validation.js'
import { UPGRADEABLE_STATES } from './planning.js'
import type { RolloutNodeStatus } from './states.js'

export interface NodeUpgradeDeps {
  db: Db
  logger: Logger
  catalogue: () => ChainCatalogue
  now: () => Date
  pollIntervalMs: number
  /** How long the agent may take for one upgrade command. */
  commandTimeoutMs: number
}

/** What to install: the rollout's target, or for a rollback the node's previous version. */
export interface UpgradeTarget {
  rolloutId: string
  chainProfileId: string
  binaryName: string
  version: string
  url: string
  /** `sha256:<hex>` */
  checksum: string
  configFiles?: ConfigFile[]
  /** Absent: unchanged; null: cleared (a rollback to the profile's own configuration). */
  configVersion?: string | null
  /** The process's arguments and environment, when they change with the version. */
  run?: RunSpec
  /** The configuration the previous version ran, sent with it when a failed validation reverts the node. */
  revert?: Pick<UpgradeTarget, 'configFiles' | 'configVersion' | 'run'>
  healthWaitMs: number
}

export interface RolloutNodeRef {
  /** rollout_nodes.id */
  id: string
  nodeId: string
}

export interface NodeUpgradeOutcome {
  status: RolloutNodeStatus
  upgrade_phase: UpgradePhase | null
  error_message: string | null
}

type Mode = { kind: 'upgrade' } | { kind: 'rollback' }

interface RolloutNodeRow {
  status: RolloutNodeStatus
  upgrade_phase: UpgradePhase | null
  attempt_count: number
  previous_version: string | null
  previous_binary_url: string | null
  previous_checksum: string | null
  error_message: string | null
}

async function readRolloutNode(db: Queryable, id: string): Promise<RolloutNodeRow> {
  const row = (await db('rollout_nodes').where({ id }).first('status', 'upgrade_phase', 'attempt_count', 'previous_version', 'previous_binary_url', 'previous_checksum', 'error_message')) as
    | Record<string, unknown>
    | undefined
  if (!row) throw new Error(`rollout node ${id} not found`)
  return {
    status: row.status as RolloutNodeStatus,
    upgrade_phase: (row.upgrade_phase as UpgradePhase | null) ?? null,
    attempt_count: Number(row.attempt_count),
    previous_version: (row.previous_version as string | null) ?? null,
    previous_binary_url: (row.previous_binary_url as string | null) ?? null,
    previous_checksum: (row.previous_checksum as string | null) ?? null,
    error_message: (row.error_message as string | null) ?? null,
  }
}

const hex = (checksum: string) => checksum.replace(/^sha256:/, '')

/**
 * How long a step rolling nodes back may take: each node may first wait to be upgradeable again
 * (runNodeChange), then an upgrade command, its health validation, and a revert command.
 */
export function rollbackStepTimeoutMs(commandTimeoutMs: number, healthWaitMs: number): number {
  return 2 * commandTimeoutMs + Math.max(60_000, 4 * healthWaitMs) + healthWaitMs + 600_000
}

/**
 * A step that upgrades or rolls back nodes (a rollout's batch, a group's component): the spec's
 * upgrade activity class (3 attempts, heartbeat timeout 30 s; the step heartbeats on every poll
 * of its nodes' commands and health). Its timeout is the whole step's: each node's upgrade
 * command (AGENT_COMMAND_TIMEOUT, the class's 10 minutes by default), its health validation and
 * a revert, all nodes in parallel.
 */
export function upgradeStep(timeoutMs: number): StepOptions {
  return { preset: 'upgrade', timeoutMs }
}

/** Upgrades one node to `target` (the rollout's own nodes, batch by batch). */
export async function upgradeNode(deps: NodeUpgradeDeps, target: UpgradeTarget, ref: RolloutNodeRef, heartbeat?: () => void): Promise<NodeUpgradeOutcome> {
  return runNodeChange(deps, target, ref, { kind: 'upgrade' }, heartbeat)
}

/**
 * Rollback of a succeeded node (spec: "Full rollback … upgrades every succeeded node back with
 * target and source swapped"): `target` is the node's previous version.
 */
export async function rollBackNode(deps: NodeUpgradeDeps, target: UpgradeTarget, ref: RolloutNodeRef, heartbeat?: () => void): Promise<NodeUpgradeOutcome> {
  return runNodeChange(deps, target, ref, { kind: 'rollback' }, heartbeat)
}

async function runNodeChange(deps: NodeUpgradeDeps, target: UpgradeTarget, ref: RolloutNodeRef, mode: Mode, heartbeat?: () => void): Promise<NodeUpgradeOutcome> {
  // Just upgraded (or just undone), a node is syncing until the health evaluation finds it synced,
  // and syncing has no move to maintenance: a rollback or a retry waits for it (a while) instead
  // of leaving it behind.
  await untilUpgradeable(deps, ref.nodeId, Math.max(60_000, 4 * target.healthWaitMs), heartbeat)
  const begun = await begin(deps, target, ref, mode)
  if ('done' in begun) return begun.done
  const { attempt, previousVersion } = begun
  const keyBase = `rollout:${target.rolloutId}:${ref.nodeId}:${mode.kind}:${attempt}`
  const event = (status: string, phase: UpgradePhase | null, error: string | null = null): NodeUpgradeEvent => ({
    node_id: ref.nodeId,
    rollout_id: target.rolloutId,
    status,
    upgrade_phase: phase,
    target_version: target.version,
    previous_version: previousVersion,
    attempt,
    error_message: error,
  })

  const command = await sendUpgrade(deps, target, ref.nodeId, keyBase)
  const outcome = await followCommand(deps, command, ref, event, heartbeat)
  if (outcome.status !== 'completed') {
    const parsed = upgradeResult.safeParse(outcome.result)
    const undone = parsed.success && parsed.data.phase === 'rolled_back'
    const reason = `${mode.kind === 'rollback' ? 'rollback' : 'upgrade'} to ${target.version} ${outcome.status}: ${outcome.error ?? 'no reason given'}`
    return undone ? endRolledBack(deps, target, ref, event, reason, mode) : endFailedRollback(deps, target, ref, event, reason, previousVersion)
  }

  const completedAt = deps.now()
  await deps.db.transaction(async (trx) => {
    await writeConfigState(trx, ref.nodeId, target.version, target.configVersion ?? null)
    await setPhase(trx, ref, 'verifying', 'validating', event, deps.now())
  })
  const validation = await validateNodeHealth(deps.db, {
    nodeId: ref.nodeId,
    since: completedAt,
    version: target.version,
    durationMs: target.healthWaitMs,
    policy: deps.catalogue().profiles.get(target.chainProfileId)?.health_policy ?? DEFAULT_HEALTH_POLICY,
    pollIntervalMs: deps.pollIntervalMs,
    now: deps.now,
    ...(heartbeat ? { heartbeat } : {}),
  })
  if (validation.ok) return endSucceeded(deps, ref, event, mode)

  // Upgraded but unhealthy: put the previous version back.
  const reason = `health validation failed: ${validation.reason}`
  // A rollback that does not pass has nothing older to go back to (its previous version is the
  // one it just installed): the node needs a person, as when an undo fails.
  if (mode.kind === 'rollback') return endFailedRollback(deps, target, ref, event, `rollback to ${target.version}: ${reason}`, previousVersion)
  if (!previousVersion) return endFailedRollback(deps, target, ref, event, `${reason}; no previous version recorded to go back to`, previousVersion)
  const record = await readRolloutNode(deps.db, ref.id)
  const previous = record.previous_binary_url && record.previous_checksum ? { url: record.previous_binary_url, sha256: hex(record.previous_checksum) } : undefined
  if (!previous) return endFailedRollback(deps, target, ref, event, `${reason}; no artifact of ${previousVersion} known to go back to (not a release of the chain profile, nor installed by a rollout)`, previousVersion)
  await deps.db.transaction((trx) => setPhase(trx, ref, 'rollbacking', 'validating', event, deps.now(), reason))
  // The previous binary with its own configuration, not the one this upgrade brought.
  const back = await sendUpgrade(
    deps,
    { rolloutId: target.rolloutId, chainProfileId: target.chainProfileId, binaryName: target.binaryName, healthWaitMs: target.healthWaitMs, version: previousVersion, url: previous.url, checksum: `sha256:${previous.sha256}`, ...target.revert },
    ref.nodeId,
    `${keyBase}:revert`,
  )
  const reverted = await followCommand(deps, back, ref, event, heartbeat, false)
  if (reverted.status !== 'completed') {
    return endFailedRollback(deps, target, ref, event, `${reason}; going back to ${previousVersion} ${reverted.status}: ${reverted.error ?? 'no reason given'}`, previousVersion)
  }
  await deps.db.transaction((trx) => writeConfigState(trx, ref.nodeId, previousVersion, target.revert?.configVersion ?? null))
  return endRolledBack(deps, target, ref, event, reason, mode)
}

async function untilUpgradeable(deps: NodeUpgradeDeps, nodeId: string, timeoutMs: number, heartbeat?: () => void): Promise<void> {
  const deadline = deps.now().getTime() + timeoutMs
  for (;;) {
    heartbeat?.()
    const node = await findNode(deps.db, nodeId)
    if (!node || node.state !== 'syncing' || deps.now().getTime() >= deadline) return
    await new Promise((resolve) => setTimeout(resolve, deps.pollIntervalMs))
  }
}

type Begun = { done: NodeUpgradeOutcome } | { attempt: number; previousVersion: string | null }

/** Pre-check and `maintenance`, or the resumption of a node already under way. */
async function begin(deps: NodeUpgradeDeps, target: UpgradeTarget, ref: RolloutNodeRef, mode: Mode): Promise<Begun> {
  return deps.db.transaction(async (trx) => {
    await lockRow(trx, trx('rollout_nodes').where({ id: ref.id }).first('id'))
    const current = await readRolloutNode(trx, ref.id)
    const now = deps.now()
    const startable: RolloutNodeStatus[] = mode.kind === 'upgrade' ? ['pending'] : ['succeeded']
    if (current.status === 'in_progress' || current.status === 'validating') {
      return { attempt: current.attempt_count, previousVersion: current.previous_version }
    }
    if (!startable.includes(current.status)) {
      return { done: { status: current.status, upgrade_phase: current.upgrade_phase, error_message: current.error_message } }
    }
    const node = await findNode(trx, ref.nodeId)
    const skip = async (why: string): Promise<Begun> => {
      // A rollback leaves a node it cannot touch as it is (still succeeded, on the target).
      if (mode.kind === 'rollback') return { done: { status: current.status, upgrade_phase: current.upgrade_phase, error_message: why } }
      await trx('rollout_nodes').where({ id: ref.id }).update({ status: 'skipped', error_message: why, completed_at: now, updated_at: now })
      return { done: { status: 'skipped', upgrade_phase: null, error_message: why } }
    }
    if (!node) return skip('the node no longer exists')
    if (!(UPGRADEABLE_STATES as readonly string[]).includes(node.state)) return skip(`the node is ${node.state}, not ${UPGRADEABLE_STATES.join(' or ')}`)
    const subscription = (await trx('subscriptions').where({ id: node.subscription_id }).first('status')) as { status: string } | undefined
    if (subscription?.status !== 'active') return skip(`its subscription is ${subscription?.status ?? 'gone'}, not active`)

    const version = (await trx('node_config_state').where({ node_id: node.id }).first('binary_version')) as { binary_version: string | null } | undefined
    const attempt = current.attempt_count + 1
    const fields: Record<string, unknown> = { status: 'in_progress', upgrade_phase: 'preparing', attempt_count: attempt, error_message: null, started_at: now, completed_at: null, updated_at: now }
    // The version it runs before the upgrade, kept for a rollback (a rollback keeps the record).
    let previousVersion = current.previous_version
    if (mode.kind === 'upgrade') {
      previousVersion = version?.binary_version ?? null
      const artifact = previousVersion ? await artifactOf(trx, deps.catalogue(), target.chainProfileId, previousVersion, { nodeId: node.id }) : undefined
      Object.assign(fields, { previous_version: previousVersion, previous_binary_url: artifact?.url ?? null, previous_checksum: artifact ? `sha256:${artifact.sha256}` : null })
    }
    await trx('rollout_nodes').where({ id: ref.id }).update(fields)
    await applyHealthUpdate(trx, { nodeId: node.id, current: node, change: { writer: 'upgrade', state: 'maintenance' }, reason: `${mode.kind} to ${target.version} (rollout ${target.rolloutId})`, now })
    await publishNodeUpgradeEvent(
      trx,
      'upgrade_started',
      { node_id: node.id, rollout_id: target.rolloutId, status: 'in_progress', upgrade_phase: 'preparing', target_version: target.version, previous_version: previousVersion, attempt },
      now,
    )
    return { attempt, previousVersion }
  })
}

async function sendUpgrade(deps: NodeUpgradeDeps, target: UpgradeTarget, nodeId: string, key: string): Promise<AgentCommand> {
  // A stored artifact, or a signed release of the chain profile, travels with its release
  // signature, which agents with release keys verify (and those requiring signatures need).
  const release = releaseOf(deps.catalogue(), target.chainProfileId, target.version)
  const signature =
    (await storedSignature(deps.db, { binary_name: target.binaryName, version: target.version, sha256: hex(target.checksum) })) ??
    (release?.url === target.url && release.sha256 === hex(target.checksum) ? release.signature : undefined)
  const payload = {
    binary_name: target.binaryName,
    artifact: { version: target.version, url: target.url, sha256: hex(target.checksum), ...(signature ? { signature } : {}) },
    ...(target.configFiles && target.configFiles.length > 0 ? { config_files: target.configFiles } : {}),
    ...(target.configVersion !== undefined ? { config_version: target.configVersion } : {}),
    ...(target.run ? { run: target.run } : {}),
  }
  return enqueueCommand(deps.db, { nodeId, type: 'upgrade', payload, idempotencyKey: key }, deps.now())
}

/** Waits for the command, mirroring the agent's reported phase into `upgrade_phase`. */
async function followCommand(
  deps: NodeUpgradeDeps,
  command: AgentCommand,
  ref: RolloutNodeRef,
  event: (status: string, phase: UpgradePhase | null) => NodeUpgradeEvent,
  heartbeat?: () => void,
  mirror = true,
): Promise<AgentCommand> {
  const deadline = deps.now().getTime() + deps.commandTimeoutMs
  // A step run again (at least once) finds the node's phase already past what the finished
  // command last reported: mirroring only forward never takes it back (verifying -> starting).
  let phase: string | null = mirror ? (await readRolloutNode(deps.db, ref.id)).upgrade_phase : null
  for (;;) {
    heartbeat?.()
    const seen = await awaitCommand(deps.db, command.id, { timeoutMs: Math.max(deps.pollIntervalMs * 4, 200), pollIntervalMs: deps.pollIntervalMs, now: deps.now })
    if (mirror && seen.progress_phase && seen.progress_phase !== phase && isUpgradePhase(seen.progress_phase) && !behind(seen.progress_phase, phase)) {
      const reported: UpgradePhase = seen.progress_phase
      phase = reported
      await deps.db.transaction((trx) => setPhase(trx, ref, reported, 'in_progress', event, deps.now()))
    }
    if (seen.status === 'completed' || seen.status === 'failed' || seen.status === 'cancelled') return seen
    if (deps.now().getTime() >= deadline) {
      await cancelCommand(deps.db, command.id, `no outcome within ${Math.round(deps.commandTimeoutMs / 1000)} s`, deps.now())
      return { ...seen, status: 'cancelled', error: `no outcome within ${Math.round(deps.commandTimeoutMs / 1000)} s` }
    }
  }
}

const PHASES: readonly string[] = ['preparing', 'stopped', 'mutating', 'starting', 'verifying', 'completed', 'rollbacking', 'rolled_back', 'failed_rollback']
/** The agent's phases, then the control plane's verifying, in the order an upgrade passes them. */
const FORWARD: readonly string[] = ['preparing', 'stopped', 'mutating', 'starting', 'verifying']
/** Whether `reported` comes before `current` on the way forward (anything else may be mirrored). */
function behind(reported: string, current: string | null): boolean {
  const at = current === null ? -1 : FORWARD.indexOf(current)
  return at >= 0 && FORWARD.indexOf(reported) < at
}
function isUpgradePhase(value: string): value is UpgradePhase {
  return PHASES.includes(value)
}

async function setPhase(
  trx: Queryable,
  ref: RolloutNodeRef,
  phase: UpgradePhase,
  status: RolloutNodeStatus,
  event: (status: string, phase: UpgradePhase | null, error?: string | null) => NodeUpgradeEvent,
  now: Date,
  error: string | null = null,
): Promise<void> {
  await trx('rollout_nodes').where({ id: ref.id }).update({ upgrade_phase: phase, status, updated_at: now, ...(error ? { error_message: error } : {}) })
  await publishNodeUpgradeEvent(trx, 'upgrade_phase_changed', event(status, phase, error), now)
}

async function endSucceeded(deps: NodeUpgradeDeps, ref: RolloutNodeRef, event: (s: string, p: UpgradePhase | null) => NodeUpgradeEvent, mode: Mode): Promise<NodeUpgradeOutcome> {
  const status: RolloutNodeStatus = mode.kind === 'rollback' ? 'rolled_back' : 'succeeded'
  const phase: UpgradePhase = mode.kind === 'rollback' ? 'rolled_back' : 'completed'
  await deps.db.transaction(async (trx) => {
    const now = deps.now()
    await applyHealthUpdate(trx, { nodeId: ref.nodeId, change: { writer: 'upgrade', state: 'syncing' }, reason: mode.kind === 'rollback' ? 'rolled back' : 'upgraded', now })
    await trx('rollout_nodes').where({ id: ref.id }).update({ status, upgrade_phase: phase, completed_at: now, updated_at: now })
    await publishNodeUpgradeEvent(trx, 'upgrade_completed', event(status, phase), now)
  })
  return { status, upgrade_phase: phase, error_message: null }
}

/** Back on its previous version after a failure: syncing again, the rollout node failed. */
async function endRolledBack(deps: NodeUpgradeDeps, target: UpgradeTarget, ref: RolloutNodeRef, event: (s: string, p: UpgradePhase | null, e?: string | null) => NodeUpgradeEvent, reason: string, mode: Mode): Promise<NodeUpgradeOutcome> {
  // A failed rollback of a node leaves it on the target, succeeded as before.
  const status: RolloutNodeStatus = mode.kind === 'rollback' ? 'succeeded' : 'failed'
  await deps.db.transaction(async (trx) => {
    const now = deps.now()
    await applyHealthUpdate(trx, { nodeId: ref.nodeId, change: { writer: 'upgrade', state: 'syncing' }, reason, now })
    await trx('rollout_nodes').where({ id: ref.id }).update({ status, upgrade_phase: 'rolled_back', error_message: reason.slice(0, 2000), completed_at: now, updated_at: now })
    await publishNodeUpgradeEvent(trx, 'upgrade_completed', event(status, 'rolled_back', reason), now)
  })
  deps.logger.warn({ nodeId: ref.nodeId, rolloutId: target.rolloutId, reason }, 'node upgrade failed; node back on its previous version')
  return { status, upgrade_phase: 'rolled_back', error_message: reason }
}

async function endFailedRollback(
  deps: NodeUpgradeDeps,
  target: UpgradeTarget,
  ref: RolloutNodeRef,
  event: (s: string, p: UpgradePhase | null, e?: string | null) => NodeUpgradeEvent,
  reason: string,
  previousVersion: string | null,
): Promise<NodeUpgradeOutcome> {
  await deps.db.transaction(async (trx) => {
    const now = deps.now()
    await forceNodeState(trx, { nodeId: ref.nodeId, state: 'degraded', reason: `upgrade could not be undone: ${reason}`, now })
    await trx('rollout_nodes').where({ id: ref.id }).update({ status: 'failed', upgrade_phase: 'failed_rollback', error_message: reason.slice(0, 2000), completed_at: now, updated_at: now })
    await publishNodeUpgradeEvent(trx, 'upgrade_completed', event('failed', 'failed_rollback', reason), now)
    await raiseUpgradeFailureIncident(trx, {
      nodeId: ref.nodeId,
      rolloutId: target.rolloutId,
      targetVersion: target.version,
      ...(previousVersion ? { sourceVersion: previousVersion } : {}),
      reason,
      now,
    })
  })
  deps.logger.error({ nodeId: ref.nodeId, rolloutId: target.rolloutId, reason }, 'node upgrade failed and could not be undone: node degraded, incident raised')
  return { status: 'failed', upgrade_phase: 'failed_rollback', error_message: reason }
}

export function releaseOf(catalogue: ChainCatalogue, chainProfileId: string, version: string): { url: string; sha256: string; signature?: string } | undefined {
  return catalogue.profiles.get(chainProfileId)?.releases.find((r) => r.version === version)
}

/**
 * The artifact of `version` for a node to go back to: the chain profile's release, or else the
 * one the rollout that installed `version` on this node used (a manifest's version the catalogue
 * does not list), so a node upgraded past a manifest-only version can still be reverted.
 */
export async function artifactOf(
  db: Queryable,
  catalogue: ChainCatalogue,
  chainProfileId: string,
  version: string,
  on: { nodeId?: string; nodeType?: string } = {},
): Promise<{ url: string; sha256: string } | undefined> {
  const release = releaseOf(catalogue, chainProfileId, version)
  if (release) return release
  const query = db('rollout_nodes')
    .join('rollouts', 'rollouts.id', 'rollout_nodes.rollout_id')
    .where({ 'rollouts.chain_profile_id': chainProfileId, 'rollouts.target_version': version, 'rollout_nodes.status': 'succeeded' })
    .orderBy([{ column: 'rollout_nodes.completed_at', order: 'desc', nulls: 'last' }, { column: 'rollout_nodes.id', order: 'desc' }])
  if (on.nodeId) query.where('rollout_nodes.node_id', on.nodeId)
  if (on.nodeType) query.where('rollouts.node_type', on.nodeType)
  const row = (await query.first('rollouts.target_binary_url', 'rollouts.target_binary_checksum')) as { target_binary_url: string; target_binary_checksum: string } | undefined
  return row ? { url: row.target_binary_url, sha256: hex(row.target_binary_checksum) } : undefined
}
