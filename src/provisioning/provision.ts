/**
 * The `provision` workflow (spec: "Provisioning sequence"; workflow key = the node id, so a
 * redelivered trigger cannot start a second one). On any failure the host and the node's keys
 * are removed and the node ends `failed`: no orphaned host or key is left behind.
 */
import { createAgentToken, revokeAgentToken } from '../agent-gateway/tokens.js'
import { getProfile } from '../config/chains.js'
import type { Db, Queryable } from '../db/knex.js'
import { applyHealthUpdate, forceNodeState } from '../nodes/health-state-machine.js'
import { findNode, findNodeForUpdate, type NodeRecord } from '../nodes/node-store.js'
import { isTerminalState } from '../nodes/states.js'
import type { WorkflowContext } from '../workflows/index.js'
import { AGENT_WAIT_STEP, agentCommandStep, runAgentCommand, waitForAgent } from './agent-calls.js'
import { configureNode } from './configure.js'
import { providerFor, type LifecycleDeps } from './deps.js'
import { assertRequiredInputs, captureChainKeys, deleteKeys, injectNodeKeys, markInputsApplied, prepareNodeKeys } from './keys.js'
import type { Host } from './infrastructure/types.js'

export { PROVISION_WORKFLOW } from './workflow-names.js'

export interface ProvisionInput {
  nodeId: string
}

export interface ProvisionResult {
  node_id: string
  outcome: 'provisioned' | 'skipped'
  host_id?: string
  binary_version?: string
  /** Key names only, never material. */
  keys?: { generated: string[]; user_provided: string[]; injected: string[]; captured: string[] }
  reason?: string
}

interface Plan {
  node: Pick<NodeRecord, 'id' | 'subscription_id' | 'chain_profile_id' | 'node_type'>
  provider: string
  region: string
  instance_type: string
  duration: string
}

export function provisionWorkflow(deps: LifecycleDeps) {
  return async (ctx: WorkflowContext, input: ProvisionInput): Promise<ProvisionResult> => {
    const plan = await ctx.step('load-node', () => loadPlan(deps, input.nodeId))
    if ('skip' in plan) return { node_id: input.nodeId, outcome: 'skipped', reason: plan.skip }

    // Test-only fault injection (LifecycleDeps.injectFault): every forward step can be made to fail.
    const step: WorkflowContext['step'] = (name, fn, options) =>
      ctx.step(
        name,
        async (s) => {
          deps.injectFault?.(name, input.nodeId)
          return fn(s)
        },
        options,
      )
    const saga = ctx.saga()
    try {
      await step('validate-inputs', () => assertRequiredInputs(deps.db, getProfile(deps.chains.current(), plan.node.chain_profile_id), plan.node.subscription_id).then(() => true), {
        retry: { maxAttempts: 1 },
      })
      saga.add('delete-keys', () => deleteKeys(deps.db, plan.node.id))
      const keys = await step('generate-keys', () => prepareNodeKeys(deps, plan.node.id, plan.node.subscription_id, getProfile(deps.chains.current(), plan.node.chain_profile_id)))
      // The token is created inside the step that hands it to the host, so its plaintext is
      // never journaled; a retry creates a new one and re-bootstraps the same host.
      const host = await step(
        'create-infrastructure',
        async () => {
          // Registrations from before this token (a previous attempt's agent) do not count.
          const bootstrappedAt = (deps.now ?? (() => new Date()))()
          const token = await createAgentToken(deps.db, plan.node.id)
          const created = await providerFor(deps, plan.provider).createHost({
            nodeId: plan.node.id,
            hostKey: plan.node.id,
            chainProfileId: plan.node.chain_profile_id,
            nodeType: plan.node.node_type,
            region: plan.region,
            instanceType: plan.instance_type,
            agent: { ...deps.agentBootstrap, token },
          })
          await recordHost(deps.db, plan.node.id, created)
          return { ...created, bootstrapped_at: bootstrappedAt.toISOString() }
        },
        { preset: 'infrastructure' },
      )
      saga.add('destroy-infrastructure', () => providerFor(deps, host.provider).destroyHost(host.host_id), { preset: 'infrastructure' })

      // An attempt interrupted by its orchestrator dying (kill -9) uses one of the attempts; the
      // deadline is fixed from bootstrapped_at, so a retry never waits longer than it.
      await step('wait-for-agent', (step) => waitForAgent(deps, plan.node.id, new Date(host.bootstrapped_at), step.heartbeat), AGENT_WAIT_STEP)

      const configured = await step(
        'configure',
        (step) =>
          configureNode(
            deps,
            { nodeId: plan.node.id, chainProfileId: plan.node.chain_profile_id, nodeType: plan.node.node_type, provider: host.provider, hostId: host.host_id },
            `${ctx.runId}:configure`,
            step.heartbeat,
          ),
        agentCommandStep(deps.commandTimeoutMs),
      )

      const agentStep = agentCommandStep(deps.commandTimeoutMs)
      const injected = await step('inject-keys', (step) => injectNodeKeys(deps, plan.node.id, `${ctx.runId}:inject-keys`, step.heartbeat), agentStep)
      await step('start', (step) => runAgentCommand(deps, { nodeId: plan.node.id, type: 'start', payload: {}, key: `${ctx.runId}:start` }, step.heartbeat), agentStep)
      // After the first start, not before it as the spec orders it: chains such as devnet-node
      // write their node key when they first start.
      const captured = await step(
        'capture-keys',
        (step) => captureChainKeys(deps, plan.node.id, getProfile(deps.chains.current(), plan.node.chain_profile_id), `${ctx.runId}:capture-keys`, step.heartbeat),
        agentStep,
      )
      await step('mark-inputs-applied', () => markInputsApplied(deps.db, plan.node.subscription_id, new Date(keys.inputs_read_at), (deps.now ?? (() => new Date()))()))

      await step('mark-syncing', () => markProvisionedSyncing(deps.db, plan.node.id, (deps.now ?? (() => new Date()))()))
      return {
        node_id: plan.node.id,
        outcome: 'provisioned',
        host_id: host.host_id,
        binary_version: configured.binary_version,
        keys: { generated: keys.generated, user_provided: keys.user_provided, injected, captured },
      }
    } catch (err) {
      await saga.compensate()
      await ctx.step('revoke-agent-token', () => revokeAgentToken(deps.db, input.nodeId).then(() => true))
      const reason = err instanceof Error ? err.message : String(err)
      await ctx.step('mark-failed', () => markFailed(deps, input.nodeId, `provisioning failed: ${reason}`))
      throw err
    }
  }
}

/**
 * provisioning -> syncing once the chain runs. The started agent already reports, and a sync
 * report written between this step's read and its write would fail the optimistic check over and
 * over while reports keep coming (seen with fleets of nodes starting at once): the node's row is
 * locked first, so this waits for such a write instead.
 */
export async function markProvisionedSyncing(db: Db, nodeId: string, now: Date): Promise<boolean> {
  return db.transaction(async (trx) => {
    const node = await findNodeForUpdate(trx, nodeId)
    await applyHealthUpdate(trx, { nodeId, ...(node ? { current: node } : {}), change: { writer: 'provisioning', state: 'syncing' }, reason: 'provisioned', now })
    return true
  })
}

async function loadPlan(deps: LifecycleDeps, nodeId: string): Promise<Plan | { skip: string }> {
  const node = await findNode(deps.db, nodeId)
  if (!node) return { skip: `node ${nodeId} does not exist` }
  if (node.state !== 'provisioning') return { skip: `node is ${node.state}, not provisioning` }
  const subscription = (await deps.db('subscriptions').where({ id: node.subscription_id }).first('duration', 'provider', 'region', 'instance_type')) as
    | { duration: string; provider: string | null; region: string | null; instance_type: string | null }
    | undefined
  if (!subscription) return { skip: `subscription ${node.subscription_id} does not exist` }
  const provider = node.provider ?? subscription.provider
  const region = node.region ?? subscription.region
  const instanceType = node.instance_type ?? subscription.instance_type
  if (!provider || !region || !instanceType) throw new Error(`node ${nodeId} has no resolved placement (provider, region, instance type)`)
  return {
    node: { id: node.id, subscription_id: node.subscription_id, chain_profile_id: node.chain_profile_id, node_type: node.node_type },
    provider,
    region,
    instance_type: instanceType,
    duration: subscription.duration,
  }
}

export async function recordHost(db: Queryable, nodeId: string, host: Host): Promise<void> {
  await db('nodes')
    .where({ id: nodeId })
    .update({ provider: host.provider, instance_type: host.instance_type, host_id: host.host_id, host_ip: host.host_ip, region: host.region, updated_at: new Date() })
}

/** `failed` through the table from provisioning, the forced path from anywhere else. */
async function markFailed(deps: LifecycleDeps, nodeId: string, reason: string): Promise<boolean> {
  const now = (deps.now ?? (() => new Date()))()
  return deps.db.transaction(async (trx) => {
    const node = await findNode(trx, nodeId)
    if (!node || isTerminalState(node.state)) return false
    if (node.state === 'provisioning') {
      await applyHealthUpdate(trx, { nodeId, current: node, change: { writer: 'provisioning', state: 'failed' }, reason, now })
    } else {
      await forceNodeState(trx, { nodeId, state: 'failed', reason, now })
    }
    return true
  })
}
