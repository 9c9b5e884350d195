/** The node lifecycle (issue 5): provision and terminate workflows, triggers, providers. */
import type { WorkflowRegistry } from '../workflows/index.js'
import type { LifecycleDeps } from './deps.js'
import { PROVISION_WORKFLOW, provisionWorkflow } from './provision.js'
import { TERMINATE_WORKFLOW, terminateWorkflow, type TerminationHooks } from './terminate.js'

export type { AgentBootstrapSettings, LifecycleDeps } from './deps.js'
export { PROVISION_WORKFLOW, TERMINATE_WORKFLOW }
export { requestProvision, requestTermination } from './triggers.js'

export function registerLifecycleWorkflows(registry: WorkflowRegistry, deps: LifecycleDeps, hooks: TerminationHooks = {}): WorkflowRegistry {
  return registry.register(PROVISION_WORKFLOW, provisionWorkflow(deps)).register(TERMINATE_WORKFLOW, terminateWorkflow(deps, hooks))
}
