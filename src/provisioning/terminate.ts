/**
 * The `terminate` workflow (spec: "Termination sequence (best effort, only the final state
 * update is critical)"; workflow key = the node id). Each middle step is tried with its retry
 * budget; one that still fails is recorded and skipped, so a node always ends `terminated`.
 */
import { revokeAgentToken } from '../agent-gateway/tokens.js'
import { forgetDeletedRows } from '../db/dialect.js'
import { deleteSealedInputs } from '../subscriptions/inputs.js'
import { applyHealthUpdate } from '../nodes/health-state-machine.js'
import { findNode } from '../nodes/node-store.js'
import { isTerminalState } from '../nodes/states.js'
import { StepFailedError, type WorkflowContext } from '../workflows/index.js'
import { runAgentCommand } from './agent-calls.js'
import { providerFor, type LifecycleDeps } from './deps.js'
import { deleteNodeBackups } from './backup-store.js'
import { deleteKeys } from './keys.js'

export { TERMINATE_WORKFLOW } from './workflow-names.js'

export interface TerminateInput {
  nodeId: string
  reason?: string
}

export interface TerminateResult {
  node_id: string
  /** `cleaned_up`: a failed node's host and keys removed; it stays `failed`. */
  outcome: 'terminated' | 'cleaned_up' | 'skipped'
  /** Best-effort steps that failed and were skipped, with why. */
  skipped_steps: { step: string; error: string }[]
  reason?: string
}

export function terminateWorkflow(deps: LifecycleDeps) {
  return async (ctx: WorkflowContext, input: TerminateInput): Promise<TerminateResult> => {
    const now = () => (deps.now ?? (() => new Date()))()
    const target = await ctx.step('load-node', async () => {
      const node = await findNode(deps.db, input.nodeId)
      if (!node) return { skip: `node ${input.nodeId} does not exist` }
      if (node.state === 'terminated') return { skip: 'node is already terminated' }
      // A failed node stays failed (terminal), but what it may still hold — a host kept by a
      // migration that failed before its new host existed, its keys — is cleaned up all the same.
      return { provider: node.provider, host_id: node.host_id, failed: isTerminalState(node.state), subscription_id: node.subscription_id }
    })
    if ('skip' in target) return { node_id: input.nodeId, outcome: 'skipped', skipped_steps: [], reason: target.skip }

    if (!target.failed) await ctx.step('mark-terminating', () =>
      deps.db
        .transaction((trx) =>
          applyHealthUpdate(trx, { nodeId: input.nodeId, change: { writer: 'termination', state: 'terminating' }, reason: input.reason ?? 'terminated', now: now() }),
        )
        .then(() => true),
    )

    const skipped: { step: string; error: string }[] = []
    const bestEffort = async (name: string, fn: (heartbeat: () => void) => Promise<unknown>) => {
      try {
        await ctx.step(name, (step) => fn(step.heartbeat).then(() => true), { retry: { maxAttempts: 3 } })
      } catch (err) {
        // Only a step's own failure is skipped; the engine's interruptions pass through.
        if (!(err instanceof StepFailedError)) throw err
        skipped.push({ step: name, error: err.message })
        deps.logger.warn({ node_id: input.nodeId, step: name, err: err.message }, 'termination step failed; skipped (best effort)')
      }
    }

    await bestEffort('stop-node', async (heartbeat) => {
      const agent = await deps.db('agent_registrations').where({ node_id: input.nodeId }).first('disconnected_at', 'connected_at')
      // No agent ever registered, or it is gone: nothing to stop; the host goes next anyway.
      if (!agent || agent.disconnected_at) return
      await runAgentCommand({ ...deps, commandTimeoutMs: Math.min(deps.commandTimeoutMs, 60_000) }, { nodeId: input.nodeId, type: 'stop', payload: {}, key: `${ctx.runId}:stop` }, heartbeat)
    })
    await bestEffort('delete-keys', async () => {
      await revokeAgentToken(deps.db, input.nodeId, now())
      await deps.db.transaction(async (trx) => {
        await deleteKeys(trx, input.nodeId)
        // A failed node's subscription may be provisioned again (with the secrets it was given);
        // a terminated node's secrets die with it.
        if (!target.failed) await deleteSealedInputs(trx, [target.subscription_id])
      })
      await forgetDeletedRows(deps.db)
    })
    // The snapshot is already undecryptable (its key derives from the data key just deleted);
    // the files go too.
    await bestEffort('delete-backups', async () => {
      const removed = await deleteNodeBackups(deps.backupStoreUrl, input.nodeId)
      if (removed.length > 0) deps.logger.info({ node_id: input.nodeId, removed }, 'node backups deleted')
    })
    await bestEffort('destroy-infrastructure', async () => {
      if (target.host_id) await providerFor(deps, target.provider).destroyHost(target.host_id)
    })
    await bestEffort('verify-cleanup', async () => {
      if (!target.host_id) return
      const status = await providerFor(deps, target.provider).hostStatus(target.host_id)
      if (status !== 'missing') throw new Error(`host ${target.host_id} is still ${status}`)
    })

    if (target.failed) return { node_id: input.nodeId, outcome: 'cleaned_up', skipped_steps: skipped }
    // The one critical step: retried until it lands.
    await ctx.step(
      'mark-terminated',
      () =>
        deps.db
          .transaction((trx) =>
            applyHealthUpdate(trx, { nodeId: input.nodeId, change: { writer: 'termination', state: 'terminated' }, reason: input.reason ?? 'terminated', now: now() }),
          )
          .then(() => true),
      { retry: { maxAttempts: 1_000, initialIntervalMs: 1_000, backoffCoefficient: 2, maximumIntervalMs: 60_000 } },
    )
    return { node_id: input.nodeId, outcome: 'terminated', skipped_steps: skipped }
  }
}
