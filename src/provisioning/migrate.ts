/**
 * The `migrate` workflow (spec: "Migration sequence": set maintenance; provision new host; wait
 * for agent; configure; check backup; restore snapshot; inject keys; start; destroy old host;
 * update host info; set syncing). One run per migration attempt: the workflow key is the node id
 * and the time the attempt was triggered (`last_migration_triggered_at`), see `requestMigration`.
 *
 * On failure before the new host is started: a new host is destroyed and the node goes back to
 * `degraded` ("a failed migration with new infrastructure restores degraded"); a migration that
 * failed before any new infrastructure existed ends `failed` from `maintenance` (the spec's
 * `migration_failed` incident). docs/node-lifecycle.md explains the reading.
 *
 * An attempt the health evaluator's trigger started (`onlyIfDown`) re-checks the node at its first
 * step: a node that heartbeated its way back to `healthy` between the trigger and that step is
 * not migrated (outcome `not_needed`, the trigger's cooldown mark undone). An operator's
 * `node migrate` moves a healthy node all the same (docs/health.md).
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { findRegistration } from '../agent-gateway/registrations.js'
import { createAgentToken, revokeAgentToken } from '../agent-gateway/tokens.js'
import { STREAM_TOKEN_RECHECK_MS } from '../agent-gateway/protocol.js'
import { toDateOrNull } from '../db/dialect.js'
import { getProfile } from '../config/chains.js'
import { BACKUP_FORMAT } from '../secrets/backup-keys.js'
import type { Queryable } from '../db/knex.js'
import { applyHealthUpdate, forceNodeState } from '../nodes/health-state-machine.js'
import { findNodeForUpdate } from '../nodes/node-store.js'
import type { NodeState } from '../nodes/states.js'
import { NonRetryableStepError, StepFailedError, type WorkflowContext } from '../workflows/index.js'
import { AGENT_WAIT_STEP, agentCommandStep, runAgentCommand } from './agent-calls.js'
import { configureNode, installedConfigChanges } from './configure.js'
import { providerFor, type LifecycleDeps } from './deps.js'
import type { Host } from './infrastructure/types.js'
import { injectNodeKeys, sealedBackupKey } from './keys.js'
import { recordHost } from './provision.js'
import { MIGRATABLE_STATES, MIGRATE_WORKFLOW, MIGRATION_COOLDOWN_MS, migrationHostKey, migrationKey } from './workflow-names.js'

export { MIGRATABLE_STATES, MIGRATE_WORKFLOW, MIGRATION_COOLDOWN_MS, migrationKey }

/** A fresh backup from a live old host is best effort: it must not hold the migration up for long. */
const OLD_HOST_BACKUP_TIMEOUT_MS = 120_000

/** Steps after the new host runs are retried until they land: undoing them would lose the node. */
const UNTIL_IT_LANDS = { maxAttempts: 1_000, initialIntervalMs: 1_000, backoffCoefficient: 2, maximumIntervalMs: 60_000 }

export interface MigrateInput {
  nodeId: string
  reason: string
  /** ISO time the trigger wrote to `last_migration_triggered_at`; names this attempt. */
  triggeredAt: string
  forced: boolean
  /**
   * The health evaluator's trigger: the node was `down`, and the attempt goes on only while it
   * still is. Absent (operators, runs started before this field existed): any migratable state.
   */
  onlyIfDown?: boolean
  /**
   * `last_migration_triggered_at` before this attempt set it (ISO, or null for none): what an
   * attempt that ends `not_needed` puts back, so it starts no cooldown. Absent: left as it is.
   */
  previousTriggeredAt?: string | null
}

export interface MigrateResult {
  node_id: string
  /**
   * `not_needed`: an automatic attempt found its node no longer down (healthy again) and left it
   * alone; `skipped`: the node could not be migrated any more (terminating, gone, ...).
   */
  outcome: 'migrated' | 'skipped' | 'superseded' | 'not_needed'
  reason?: string
  old_host_id?: string | null
  host_id?: string
  binary_version?: string
  /** The fresh backup of the old host taken before the move. */
  /** `live`: the old agent copied the running chain (it predates `stop_chain`), up to a state write behind. */
  backup?: { taken: boolean; reason?: string; size_bytes?: number; file_count?: number; live?: boolean }
  /** Whether a snapshot was restored onto the new host. */
  restored?: boolean
  /** Names of the keys injected into the new host (never their content). */
  keys_injected?: string[]
  /** Best-effort steps that failed, and what a person should know. */
  notes: string[]
}

interface MigrationPlan {
  node: { id: string; chain_profile_id: string; node_type: string }
  old_host: Host | null
  placement: { provider: string; region: string; instance_type: string }
  /** The release the node runs now; the new host runs the same one. */
  binary_version: string | null
}

interface NewHost {
  host: Host
  /** Registrations from this time on are the new host's agent (the old token was replaced). */
  agent_since: string
  /**
   * Fencing: the new host's chain starts no earlier than this (ISO), the old agent's last
   * contact with a gateway plus the fence timeout. Absent in runs journaled before fencing.
   */
  fence_until?: string
}

/** One snapshot per node in the store: the newest one wins whichever attempt took it. */
export function migrationBackupId(nodeId: string): string {
  return nodeId
}

function newHostKey(nodeId: string, triggeredAt: string): string {
  return migrationHostKey(nodeId, new Date(triggeredAt))
}

export function migrateWorkflow(deps: LifecycleDeps) {
  const now = () => (deps.now ?? (() => new Date()))()
  return async (ctx: WorkflowContext, input: MigrateInput): Promise<MigrateResult> => {
    const nodeId = input.nodeId
    const plan = await ctx.step('set-maintenance', () => enterMaintenance(deps, input, now()))
    if ('skip' in plan) return { node_id: nodeId, outcome: 'skipped', reason: plan.skip, notes: [] }
    if ('notNeeded' in plan) return { node_id: nodeId, outcome: 'not_needed', reason: plan.notNeeded, notes: [] }
    const notes: string[] = []

    const saga = ctx.saga()
    let created: NewHost | undefined
    let backup: NonNullable<MigrateResult['backup']>
    let restored: boolean
    let binaryVersion: string
    let keysInjected: string[]
    try {
      backup = await bestEffort(ctx, 'backup-old-host', (heartbeat) => backupOldHost(deps, plan, `${ctx.runId}:backup`, heartbeat), {
        timeoutMs: OLD_HOST_BACKUP_TIMEOUT_MS + 30_000,
        retry: { maxAttempts: 1 },
      }).then((r) => (r.ok ? r.value : { taken: false, reason: r.error }))
      if (!backup.taken) notes.push(`no fresh backup of the old host: ${backup.reason ?? 'unknown reason'}`)
      if (backup.live) notes.push("the old host's agent does not stop the chain for a backup (an older agent): the snapshot is a live copy, up to one state write behind")

      // The token is created inside the step that hands it to the host, so its plaintext is
      // never journaled. It replaces the old host's token: the old agent is refused from here on.
      created = await ctx.step(
        'create-host',
        async (): Promise<NewHost> => {
          const lastContact = await oldAgentLastContact(deps, nodeId, now())
          const token = await createAgentToken(deps.db, nodeId, now())
          const agentSince = now()
          const host = await providerFor(deps, plan.placement.provider).createHost({
            nodeId,
            hostKey: newHostKey(nodeId, input.triggeredAt),
            chainProfileId: plan.node.chain_profile_id,
            nodeType: plan.node.node_type,
            region: plan.placement.region,
            instanceType: plan.placement.instance_type,
            agent: { ...deps.agentBootstrap, token },
          })
          return { host, agent_since: agentSince.toISOString(), fence_until: new Date(lastContact.getTime() + deps.fenceTimeoutMs).toISOString() }
        },
        { preset: 'infrastructure' },
      )
      const newHost = created.host
      const agentSince = new Date(created.agent_since)
      saga.add('destroy-new-host', () => providerFor(deps, newHost.provider).destroyHost(newHost.host_id), { preset: 'infrastructure' })

      // As provisioning's wait: the deadline is fixed from agent_since, so a retry never waits longer.
      const agent = await ctx.step('wait-for-agent', (step) => waitForNewAgent(deps, nodeId, agentSince, step.heartbeat), AGENT_WAIT_STEP)

      // The release the node ran, configured as it ran it: with the config changes of the rollout
      // that installed it, if one did.
      const configured = await ctx.step(
        'configure',
        async (step) =>
          configureNode(
            deps,
            {
              nodeId,
              chainProfileId: plan.node.chain_profile_id,
              nodeType: plan.node.node_type,
              provider: newHost.provider,
              hostId: newHost.host_id,
              ...(plan.binary_version ? { version: plan.binary_version, configChanges: await installedConfigChanges(deps.db, nodeId, plan.binary_version) } : {}),
            },
            `${ctx.runId}:configure`,
            step.heartbeat,
          ),
        agentCommandStep(deps.commandTimeoutMs),
      )
      binaryVersion = configured.binary_version

      const snapshot = await ctx.step('check-backup', () => findBackup(deps.backupStoreUrl, migrationBackupId(nodeId)))
      restored = snapshot.found
      if (snapshot.found) {
        // A snapshot that exists but cannot be restored fails the migration: starting from
        // scratch would silently drop chain state the node may need (e.g. a validator's).
        await ctx.step(
          'restore-snapshot',
          async (step) =>
            runAgentCommand(
              deps,
              {
                nodeId,
                type: 'restore',
                payload: {
                  backup_id: migrationBackupId(nodeId),
                  store_url: deps.backupStoreUrl,
                  key: await sealedBackupKey(deps, nodeId, migrationBackupId(nodeId), agent.public_key),
                },
                key: `${ctx.runId}:restore`,
              },
              step.heartbeat,
            ),
          agentCommandStep(deps.commandTimeoutMs),
        )
      } else {
        notes.push('no backup; the chain syncs from scratch')
      }

      // The node's generated and user-provided keys, sealed to the new agent. Keys the chain
      // wrote itself (devnet's data/nodekey) came back with the snapshot; without one, the copies
      // provisioning captured go back to where the chain keeps them, so it keeps its identity.
      const chainKeysFrom = restored ? undefined : getProfile(deps.chains.current(), plan.node.chain_profile_id)
      keysInjected = await ctx.step(
        'inject-keys',
        async (step) => {
          const registration = await findRegistration(deps.db, nodeId)
          if (registration?.public_key !== agent.public_key) throw new Error(`the agent of node ${nodeId} changed since it registered on the new host`)
          return injectNodeKeys(deps, nodeId, `${ctx.runId}:inject-keys`, step.heartbeat, chainKeysFrom)
        },
        agentCommandStep(deps.commandTimeoutMs),
      )

      // Fencing: by then a cut-off old host has stopped its chain by itself (docs/node-agent.md).
      // A durable timer: an orchestrator restart does not shorten or restart the wait.
      const fenceUntil = new Date(created.fence_until ?? new Date(created.agent_since).getTime() + (deps.streamTokenRecheckMs ?? STREAM_TOKEN_RECHECK_MS) + deps.fenceTimeoutMs)
      if (fenceUntil.getTime() > now().getTime()) {
        deps.logger.info({ node_id: nodeId, fence_until: fenceUntil.toISOString() }, "migration: waiting for the old host's fence before starting the new one")
      }
      await ctx.sleepUntil(fenceUntil)

      await ctx.step('start', (step) => runAgentCommand(deps, { nodeId, type: 'start', payload: {}, key: `${ctx.runId}:start` }, step.heartbeat), agentCommandStep(deps.commandTimeoutMs))
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err)
      try {
        await saga.compensate()
      } catch (compensationError) {
        if (!(compensationError instanceof StepFailedError)) throw compensationError
        deps.logger.error({ node_id: nodeId, host_id: created?.host.host_id, err: compensationError.message }, 'migration: the new host could not be destroyed; it needs a person')
      }
      const target: NodeState = created ? 'degraded' : 'failed'
      const restoredTo = await ctx.step('restore-node-state', () => leaveMaintenance(deps, nodeId, target, `migration failed: ${reason}`, now()))
      if (restoredTo === 'failed') {
        await ctx.step('revoke-agent-token', () => revokeAgentToken(deps.db, nodeId, now()).then(() => true))
        if (plan.old_host) deps.logger.warn({ node_id: nodeId, host_id: plan.old_host.host_id }, 'migration failed before a new host existed; the old host is kept for inspection')
      }
      throw err
    }

    // From here the new host runs the node: nothing is undone any more.
    const oldHost = plan.old_host
    if (oldHost) {
      const destroyed = await bestEffort(ctx, 'destroy-old-host', () => providerFor(deps, oldHost.provider).destroyHost(oldHost.host_id), { preset: 'infrastructure' })
      if (!destroyed.ok) {
        notes.push(`old host ${oldHost.host_id} was not destroyed: ${destroyed.error}`)
        deps.logger.warn({ node_id: nodeId, host_id: oldHost.host_id, err: destroyed.error }, 'migration: the old host could not be destroyed; it needs a person')
      }
    }

    const newHost = created.host
    const hostUpdate = await ctx.step('update-host-info', () => updateHostInfo(deps, nodeId, newHost), { retry: UNTIL_IT_LANDS })
    if (!hostUpdate.updated) {
      // Someone else took the node over (e.g. a termination): the new host is nobody's now.
      const dropped = await bestEffort(ctx, 'destroy-new-host', () => providerFor(deps, newHost.provider).destroyHost(newHost.host_id), { preset: 'infrastructure' })
      if (!dropped.ok) notes.push(`new host ${newHost.host_id} was not destroyed: ${dropped.error}`)
      return {
        node_id: nodeId,
        outcome: 'superseded',
        reason: `the node became ${hostUpdate.state} during the migration; its new host was destroyed`,
        old_host_id: oldHost?.host_id ?? null,
        backup,
        restored,
        notes,
      }
    }
    await ctx.step('mark-syncing', () => markSyncing(deps, nodeId, now()), { retry: UNTIL_IT_LANDS })
    return {
      node_id: nodeId,
      outcome: 'migrated',
      old_host_id: oldHost?.host_id ?? null,
      host_id: newHost.host_id,
      binary_version: binaryVersion,
      backup,
      restored,
      keys_injected: keysInjected,
      notes,
    }
  }
}

/**
 * The latest moment the old agent may have had a heartbeat acknowledged (its fence clock runs from
 * there), read just before its token is replaced: its last recorded heartbeat or stream opening;
 * and when a live stream of it may still be open, the replacement's moment plus the gateways'
 * token recheck, after which that stream is closed and no longer acknowledged.
 */
async function oldAgentLastContact(deps: LifecycleDeps, nodeId: string, replacingAt: Date): Promise<Date> {
  const registration = await findRegistration(deps.db, nodeId)
  let last = await lastHeard(deps, nodeId, registration?.connected_at ?? null)
  // Silent for a fence timeout already: the agent is fenced, and a fenced agent drops its stream,
  // so only a new stream, refused from now on, could reach it again. Otherwise a live stream may
  // go on being acknowledged until a gateway's recheck closes it.
  const mayStillBeHeard = registration?.connected_at && !registration.disconnected_at && replacingAt.getTime() - last < deps.fenceTimeoutMs
  if (mayStillBeHeard) last = Math.max(last, replacingAt.getTime() + (deps.streamTokenRecheckMs ?? STREAM_TOKEN_RECHECK_MS))
  return new Date(last)
}

/** The agent's last recorded heartbeat or stream opening (epoch ms; 0 for never). */
async function lastHeard(deps: LifecycleDeps, nodeId: string, connectedAt: Date | null): Promise<number> {
  const node = (await deps.db('nodes').where({ id: nodeId }).first('last_heartbeat')) as { last_heartbeat: unknown } | undefined
  return Math.max(toDateOrNull(node?.last_heartbeat)?.getTime() ?? 0, connectedAt?.getTime() ?? 0)
}

type BestEffortResult<T> = { ok: true; value: T } | { ok: false; error: string }

/** A step whose own failure is recorded, not raised; the engine's interruptions pass through. */
async function bestEffort<T>(
  ctx: WorkflowContext,
  name: string,
  fn: (heartbeat: () => void) => Promise<T>,
  options: Parameters<WorkflowContext['step']>[2],
): Promise<BestEffortResult<T>> {
  try {
    return { ok: true, value: await ctx.step(name, (step) => fn(step.heartbeat), options) }
  } catch (err) {
    if (!(err instanceof StepFailedError)) throw err
    return { ok: false, error: err.message }
  }
}

async function enterMaintenance(deps: LifecycleDeps, input: MigrateInput, now: Date): Promise<MigrationPlan | { skip: string } | { notNeeded: string }> {
  return deps.db.transaction(async (trx) => {
    const node = await findNodeForUpdate(trx, input.nodeId)
    if (!node) return { skip: `node ${input.nodeId} does not exist` }
    const triggeredAt = new Date(input.triggeredAt)
    // This step committed before and the orchestrator died before journaling it: no other
    // workflow can have put the node in maintenance since this attempt was triggered.
    const alreadyOurs =
      node.state === 'maintenance' && node.last_migration_triggered_at?.getTime() === triggeredAt.getTime() && node.state_changed_at >= triggeredAt
    if (!alreadyOurs && !MIGRATABLE_STATES.includes(node.state)) return { skip: `node is ${node.state}; a migration starts from ${MIGRATABLE_STATES.join(', ')}` }
    if (!alreadyOurs && input.onlyIfDown && node.state !== 'down') {
      // Triggered while down, back (a heartbeat during the wait for this step): nothing to move.
      // The attempt did nothing, so it does not hold the node's migration cooldown either.
      if (input.previousTriggeredAt !== undefined && node.last_migration_triggered_at?.getTime() === triggeredAt.getTime()) {
        const previous = input.previousTriggeredAt === null ? null : new Date(input.previousTriggeredAt)
        await trx('nodes').where({ id: node.id }).update({ last_migration_triggered_at: previous })
      }
      deps.logger.info({ node_id: node.id, state: node.state }, 'migration triggered while the node was down is not needed: it is no longer down')
      return { notNeeded: `node is ${node.state}, no longer down: the migration its outage triggered is not needed` }
    }

    const subscription = (await trx('subscriptions').where({ id: node.subscription_id }).first('provider', 'region', 'instance_type')) as
      | { provider: string | null; region: string | null; instance_type: string | null }
      | undefined
    const provider = node.provider ?? subscription?.provider
    const region = node.region ?? subscription?.region
    const instanceType = node.instance_type ?? subscription?.instance_type
    if (!provider || !region || !instanceType) throw new Error(`node ${node.id} has no resolved placement (provider, region, instance type)`)
    const config = (await trx('node_config_state').where({ node_id: node.id }).first('binary_version')) as { binary_version: string | null } | undefined
    const profile = getProfile(deps.chains.current(), node.chain_profile_id)
    const current = config?.binary_version ?? null

    if (!alreadyOurs) {
      await applyHealthUpdate(trx, { nodeId: node.id, current: node, change: { writer: 'migration', state: 'maintenance' }, reason: `migration: ${input.reason}`, now })
    }
    return {
      node: { id: node.id, chain_profile_id: node.chain_profile_id, node_type: node.node_type },
      old_host:
        node.host_id && node.provider
          ? { host_id: node.host_id, provider: node.provider, host_ip: node.host_ip ?? '', instance_type: node.instance_type ?? '', region: node.region ?? '' }
          : null,
      placement: { provider, region, instance_type: instanceType },
      // A release the catalogue no longer carries cannot be installed again: the default is.
      binary_version: current && profile.releases.some((r) => r.version === current) ? current : null,
    }
  })
}

async function backupOldHost(deps: LifecycleDeps, plan: MigrationPlan, commandKey: string, heartbeat: () => void): Promise<NonNullable<MigrateResult['backup']>> {
  if (!plan.old_host) return { taken: false, reason: 'the node had no host' }
  const registration = await findRegistration(deps.db, plan.node.id)
  if (!registration?.connected_at || registration.disconnected_at) return { taken: false, reason: "the old host's agent is not connected" }
  // Silent for the fence timeout: fenced (it dropped its stream) or cut off, though the gateway
  // may not have seen its stream end. A backup command would only wait out its timeout.
  const silentMs = (deps.now ?? (() => new Date()))().getTime() - (await lastHeard(deps, plan.node.id, registration.connected_at))
  if (silentMs >= deps.fenceTimeoutMs) return { taken: false, reason: `the old host's agent has been silent for ${Math.round(silentMs / 1000)} s, past the fence timeout` }
  try {
    const result = (await runAgentCommand(
      { ...deps, commandTimeoutMs: Math.min(deps.commandTimeoutMs, OLD_HOST_BACKUP_TIMEOUT_MS) },
      {
        nodeId: plan.node.id,
        type: 'backup',
        payload: {
          backup_id: migrationBackupId(plan.node.id),
          store_url: deps.backupStoreUrl,
          key: await sealedBackupKey(deps, plan.node.id, migrationBackupId(plan.node.id), registration.public_key),
          // The node is leaving this host and in maintenance (its endpoint refuses calls): its
          // chain stops for the snapshot, which then holds the last block and transaction.
          stop_chain: true,
        },
        key: commandKey,
      },
      heartbeat,
      { abandonOnDisconnect: true },
    )) as { size_bytes: number; file_count: number; chain_stopped?: boolean }
    // An agent older than `stop_chain` ignores it and copies the running chain's files.
    return { taken: true, size_bytes: result.size_bytes, file_count: result.file_count, ...(result.chain_stopped ? {} : { live: true }) }
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err)
    deps.logger.warn({ node_id: plan.node.id, err: reason }, 'migration: the old host could not be backed up; going on without a fresh backup')
    return { taken: false, reason }
  }
}

/**
 * The new host's agent: registered after its token was created, and connected. Waiting for the
 * connection matters: until the new stream replaces the old one, the gateway could still hand a
 * command for this node to the old host's agent.
 */
async function waitForNewAgent(deps: LifecycleDeps, nodeId: string, since: Date, heartbeat: () => void): Promise<{ public_key: string; hostname: string; registered_at: string }> {
  const deadline = since.getTime() + deps.agentReadyWaitMs
  for (;;) {
    heartbeat()
    const r = await findRegistration(deps.db, nodeId)
    if (r && r.registered_at >= since && r.connected_at && r.connected_at >= r.registered_at && !r.disconnected_at) {
      return { public_key: r.public_key, hostname: r.hostname, registered_at: r.registered_at.toISOString() }
    }
    if ((deps.now ?? (() => new Date()))().getTime() >= deadline) {
      throw new NonRetryableStepError(`the agent of node ${nodeId} on the new host did not register within ${Math.round(deps.agentReadyWaitMs / 1000)} s`)
    }
    await new Promise((resolve) => setTimeout(resolve, deps.pollIntervalMs))
  }
}

type BackupCheck = { found: false } | { found: true; created_at: string | null; size_bytes: number | null; file_count: number | null }

/**
 * "Check backup": the snapshot the agent's `backup` command writes to `<store>/<backup id>/`
 * with its `manifest.json` last (src/node-agent/backup.ts). The store is a `file://` URL the
 * orchestrator and the hosts both reach (a shared mount in production).
 */
export async function findBackup(storeUrl: string, backupId: string): Promise<BackupCheck> {
  const url = new URL(storeUrl)
  if (url.protocol !== 'file:') throw new Error(`backup store ${url.protocol} is not supported (file:// only)`)
  const manifestFile = path.join(fileURLToPath(url), backupId, 'manifest.json')
  let text: string
  try {
    text = await fs.promises.readFile(manifestFile, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { found: false }
    throw err
  }
  const manifest = JSON.parse(text) as { created_at?: unknown; size_bytes?: unknown; file_count?: unknown; encryption?: { format?: unknown } }
  // A snapshot written before backups were encrypted is not restored; the purge removes it.
  if (manifest.encryption?.format !== BACKUP_FORMAT) return { found: false }
  return {
    found: true,
    created_at: typeof manifest.created_at === 'string' ? manifest.created_at : null,
    size_bytes: typeof manifest.size_bytes === 'number' ? manifest.size_bytes : null,
    file_count: typeof manifest.file_count === 'number' ? manifest.file_count : null,
  }
}

/** Compensation: out of maintenance by the forced path (maintenance -> degraded/failed is not in the table). */
async function leaveMaintenance(deps: LifecycleDeps, nodeId: string, state: NodeState, reason: string, now: Date): Promise<NodeState | null> {
  return deps.db.transaction(async (trx) => {
    const node = await findNodeForUpdate(trx, nodeId)
    // A node that left maintenance meanwhile (e.g. it is being terminated) is not ours to move.
    if (!node || node.state !== 'maintenance') return null
    await forceNodeState(trx, { nodeId, state, reason, now })
    return state
  })
}

async function updateHostInfo(deps: LifecycleDeps, nodeId: string, host: Host): Promise<{ updated: true } | { updated: false; state: string }> {
  return deps.db.transaction(async (trx) => {
    const node = await findNodeForUpdate(trx, nodeId)
    if (!node || node.state !== 'maintenance') return { updated: false, state: node?.state ?? 'deleted' }
    await recordHost(trx, nodeId, host)
    return { updated: true }
  })
}

async function markSyncing(deps: LifecycleDeps, nodeId: string, now: Date): Promise<boolean> {
  return deps.db.transaction(async (trx) => {
    const node = await findNodeForUpdate(trx, nodeId)
    if (!node || node.state !== 'maintenance') return false
    await applyHealthUpdate(trx, { nodeId, current: node, change: { writer: 'migration', state: 'syncing' }, reason: 'migrated to a new host', now })
    return true
  })
}
