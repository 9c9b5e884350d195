/** The node lifecycle (issue 5): provision, migrate and terminate workflows, host drains (issue 19), triggers, providers. */
import type { WorkflowRegistry } from '../workflows/index.js'
import type { LifecycleDeps } from './deps.js'
import { hostDrainWorkflow } from './host-drain.js'
import { MIGRATE_WORKFLOW, migrateWorkflow } from './migrate.js'
import { PROVISION_WORKFLOW, provisionWorkflow } from './provision.js'
import { TERMINATE_WORKFLOW, terminateWorkflow } from './terminate.js'
import { HOST_DRAIN_WORKFLOW } from './workflow-names.js'

export type { AgentBootstrapSettings, LifecycleDeps } from './deps.js'
export { PROVISION_WORKFLOW, TERMINATE_WORKFLOW }
export { MIGRATE_WORKFLOW, MIGRATION_COOLDOWN_MS, MIGRATABLE_STATES, type MigrateInput, type MigrateResult } from './migrate.js'
export { requestMigration, requestProvision, requestTermination, type MigrationRequest } from './triggers.js'

export function registerLifecycleWorkflows(registry: WorkflowRegistry, deps: LifecycleDeps): WorkflowRegistry {
  return registry
    .register(PROVISION_WORKFLOW, provisionWorkflow(deps))
    .register(TERMINATE_WORKFLOW, terminateWorkflow(deps))
    .register(MIGRATE_WORKFLOW, migrateWorkflow(deps))
    .register(HOST_DRAIN_WORKFLOW, hostDrainWorkflow(deps))
}
