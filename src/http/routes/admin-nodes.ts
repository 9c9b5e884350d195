/**
 * Operator actions on any node (scope `admin`; docs/node-lifecycle.md, "Operator actions"), for
 * `nodeplane node provision|migrate|terminate`:
 *
 * - `POST /api/v1/admin/nodes/{id}/provision`: start (or find) the node's provision workflow.
 * - `POST /api/v1/admin/nodes/{id}/migrate`: start (or find) a migration to a new host; the
 *   cooldown is the api-server's MIGRATION_COOLDOWN, `force` skips it (never the state rules).
 * - `POST /api/v1/admin/nodes/{id}/terminate`: start (or find) the terminate workflow; the live
 *   node of a paid subscription needs `end_subscription` (docs/subscriptions.md).
 *
 * Each is idempotent: 202 when this call started the run, 200 with the run already started.
 * Each start is one transaction, so a refused request leaves nothing behind.
 */
import type { Db } from '../../db/knex.js'
import { MIGRATION_COOLDOWN_MS } from '../../provisioning/workflow-names.js'
import { requestMigration, requestProvision } from '../../provisioning/triggers.js'
import { terminateNodeAsOperator } from '../../subscriptions/operator-termination.js'
import { SUBSCRIPTION_STATUSES } from '../../subscriptions/views.js'
import type { StartResult } from '../../workflows/index.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface AdminNodeRouteDeps {
  db: Db
  now?: () => Date
  /** MIGRATION_COOLDOWN of the api-server; the spec's 1 h when absent. */
  migrationCooldownMs?: number
}

const ADMIN = { scope: 'admin' } as const
const TAGS = ['admin']
const MAX_REASON = 500

const params = z.object({ id: z.string().uuid('must be a node id (UUID)').openapi({ description: 'Node id' }) })

const reason = (fallback: string) =>
  z
    .string()
    .trim()
    .min(1, 'must not be empty')
    .max(MAX_REASON, `at most ${MAX_REASON} characters`)
    .default(fallback)
    .openapi({ description: `Recorded in the run and the health events (default "${fallback}")` })

const runStarted = z
  .object({
    node_id: z.string().uuid(),
    workflow: z.string().openapi({ example: 'provision' }),
    run_id: z.string().uuid(),
    created: z.boolean().openapi({ description: 'false when the run was already started (an earlier call, the payment, the health evaluator)' }),
    status: z.string().openapi({ description: "The run's status (docs/workflows.md)" }),
  })
  .openapi('NodeWorkflowStarted')

const terminationStarted = runStarted
  .extend({
    subscription_id: z.string().uuid(),
    subscription_status: z.enum(SUBSCRIPTION_STATUSES).openapi({ description: "The node's subscription after the call" }),
    subscription_ended: z.boolean().openapi({ description: 'This call ended the subscription (end_subscription)' }),
    other_nodes: z.array(z.string().uuid()).openapi({ description: 'Other nodes of the subscription whose termination this call started' }),
  })
  .openapi('NodeTerminationStarted')

const migrateBody = z
  .object({
    reason: reason('migrated by an operator'),
    force: z.boolean().default(false).openapi({ description: 'Ignore the migration cooldown (not the state rules)' }),
  })
  .strict()

const terminateBody = z
  .object({
    reason: reason('terminated by an operator'),
    end_subscription: z.boolean().default(false).openapi({ description: "End the node's paid subscription with it (the customer is notified)" }),
  })
  .strict()

function started(nodeId: string, result: StartResult) {
  return { node_id: nodeId, workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
}

export function adminNodeRoutes(deps: AdminNodeRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  const cooldownMs = deps.migrationCooldownMs ?? MIGRATION_COOLDOWN_MS
  const responses = {
    200: runStarted,
    202: runStarted,
    404: errorResponse('No such node'),
  }
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/admin/nodes/{id}/provision',
      summary: "Start (or find) the node's provision workflow; a node not in provisioning is left alone (the run ends skipped)",
      tags: TAGS,
      auth: ADMIN,
      request: { params },
      responses,
    }).handle(async ({ params, log }) => {
      const id = params.id.toLowerCase()
      const result = await requestProvision(db, id, now())
      log.info({ nodeId: id, workflowId: result.run.id, created: result.created }, 'provision requested by an admin')
      return { status: result.created ? 202 : 200, body: started(id, result) }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/admin/nodes/{id}/migrate',
      summary: 'Start (or find) a migration of the node to a new host',
      description: `A node in healthy, degraded or down moves to maintenance and gets a new host restored from its latest backup. While a migration runs, that run is answered (200). 409 when the node's state forbids it, or within the migration cooldown (MIGRATION_COOLDOWN) unless force.`,
      tags: TAGS,
      auth: ADMIN,
      request: { params, body: migrateBody },
      responses: { ...responses, 409: errorResponse("The node's state forbids a migration, or it is in its cooldown") },
    }).handle(async ({ params, body, log }) => {
      const id = params.id.toLowerCase()
      const result = await requestMigration(db, id, { reason: body.reason, force: body.force, cooldownMs, now: now() })
      log.info({ nodeId: id, workflowId: result.run.id, created: result.created, forced: body.force }, 'migration requested by an admin')
      return { status: result.created ? 202 : 200, body: started(id, result) }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/admin/nodes/{id}/terminate',
      summary: "Start (or find) the node's terminate workflow (best effort; the node always ends terminated)",
      description:
        'The live node of an active or expiring subscription is refused (409) unless end_subscription ends the subscription with it: every node of it is terminated and the customer notified, in one transaction.',
      tags: TAGS,
      auth: ADMIN,
      request: { params, body: terminateBody },
      responses: { 200: terminationStarted, 202: terminationStarted, 404: errorResponse('No such node'), 409: errorResponse("The node of a paid subscription, without end_subscription") },
    }).handle(async ({ params, body, log }) => {
      const id = params.id.toLowerCase()
      const result = await terminateNodeAsOperator(db, { nodeId: id, reason: body.reason, endSubscription: body.end_subscription, now: now() })
      log.info({ nodeId: id, workflowId: result.run.id, created: result.created, subscriptionEnded: result.subscription_ended }, 'termination requested by an admin')
      const { run: _run, created: _created, ...subscription } = result
      return { status: result.created ? 202 : 200, body: { ...started(id, result), ...subscription } }
    }),
  ]
}
