/** The rollout workflows, registered on an orchestrator next to the node lifecycle's. */
import type { LifecycleDeps } from '../provisioning/deps.js'
import type { WorkflowRegistry } from '../workflows/index.js'
import { registerGroupWorkflow } from './group-workflow.js'
import type { NodeUpgradeDeps } from './node-upgrade.js'
import { registerRolloutWorkflow } from './rollout-workflow.js'

export function rolloutDeps(lifecycle: LifecycleDeps): NodeUpgradeDeps {
  return {
    db: lifecycle.db,
    logger: lifecycle.logger.child({ component: 'rollouts' }),
    catalogue: () => lifecycle.chains.current(),
    now: lifecycle.now ?? (() => new Date()),
    pollIntervalMs: lifecycle.pollIntervalMs,
    commandTimeoutMs: lifecycle.commandTimeoutMs,
  }
}

export function registerRolloutWorkflows(registry: WorkflowRegistry, lifecycle: LifecycleDeps): WorkflowRegistry {
  const deps = rolloutDeps(lifecycle)
  return registerGroupWorkflow(registerRolloutWorkflow(registry, deps), deps)
}
