/**
 * The `orchestrator` daemon: runs the durable workflow worker (src/workflows). Any number of
 * orchestrators may share one Postgres; runs are spread between them by leases.
 */
import type { z } from 'zod'
import { orchestratorEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import type { Logger } from '../src/log.js'
import { createWorkflowRegistry, createWorkflowWorker, type WorkflowRegistry, type WorkflowWorker } from '../src/workflows/index.js'

export { orchestratorEnv }

export type OrchestratorSettings = Pick<z.infer<typeof orchestratorEnv>, 'WORKFLOW_LEASE' | 'WORKFLOW_POLL_INTERVAL' | 'WORKFLOW_CONCURRENCY'>

/** The workflows this orchestrator runs; later issues register provision, migrate, terminate… */
export function orchestratorWorkflows(): WorkflowRegistry {
  return createWorkflowRegistry()
}

export interface OrchestratorDeps {
  db: Db
  logger: Logger
  registry?: WorkflowRegistry
  now?: () => Date
}

export function startOrchestrator(settings: OrchestratorSettings, deps: OrchestratorDeps): WorkflowWorker {
  const worker = createWorkflowWorker({
    db: deps.db,
    registry: deps.registry ?? orchestratorWorkflows(),
    logger: deps.logger,
    leaseMs: settings.WORKFLOW_LEASE,
    pollIntervalMs: settings.WORKFLOW_POLL_INTERVAL,
    concurrency: settings.WORKFLOW_CONCURRENCY,
    ...(deps.now ? { now: deps.now } : {}),
  })
  worker.start()
  return worker
}
