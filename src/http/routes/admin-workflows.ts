/**
 * `/api/v1/admin/workflow-runs` (scope `admin`; docs/workflows.md, "Inspecting runs"): the durable
 * workflow runs, newest first, and one run with its steps, for `nodeplane workflow list|show`.
 * Runs are the control plane's own machinery (no user owns one), so only admins read them.
 */
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { currentSteps, getRun, listSteps, RUN_STATUSES, runFromRow, runsQuery, toRunView, toStepView } from '../../workflows/index.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface AdminWorkflowRouteDeps {
  db: Db
}

const ADMIN = { scope: 'admin' } as const
const TAGS = ['admin']
const timestamp = z.string().openapi({ format: 'date-time' })

const runView = z
  .object({
    id: z.string().uuid(),
    workflow: z.string().openapi({ example: 'provision' }),
    key: z.string().openapi({ description: "The workflow key: a provision's node id, a rollout's id" }),
    status: z.enum(RUN_STATUSES),
    current_step: z.string().nullable(),
    attempts: z.number().int().openapi({ description: 'Attempts of the current step so far' }),
    error: z.string().nullable().openapi({ description: "The run's error when it failed, otherwise the current step's last one" }),
    lease_owner: z.string().nullable(),
    lease_expires_at: timestamp.nullable(),
    wake_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
    completed_at: timestamp.nullable(),
  })
  .openapi('WorkflowRun')

const stepView = z
  .object({
    step: z.string(),
    status: z.string(),
    attempt: z.number().int(),
    error: z.string().nullable(),
    started_at: timestamp.nullable(),
    finished_at: timestamp.nullable(),
    next_attempt_at: timestamp.nullable(),
  })
  .openapi('WorkflowStep')

const runDetail = runView
  .extend({ input: z.unknown(), result: z.unknown(), steps: z.array(stepView) })
  .openapi('WorkflowRunDetail')

const listQuery = paginationQuery.extend({
  status: z.enum(RUN_STATUSES).optional().openapi({ description: 'Only runs in this status' }),
  workflow: z.string().min(1).max(64).optional().openapi({ description: 'Only runs of this workflow', example: 'provision' }),
  key: z.string().min(1).max(200).optional().openapi({ description: 'Only runs with this workflow key (a node id for provision, migrate, terminate)' }),
})

export function adminWorkflowRoutes(deps: AdminWorkflowRouteDeps): ApiRoute[] {
  const { db } = deps
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/admin/workflow-runs',
      summary: 'List workflow runs, newest first, with their current step, attempts and last error',
      tags: TAGS,
      auth: ADMIN,
      request: { query: listQuery },
      responses: { 200: pageSchema(runView).openapi('WorkflowRunPage') },
    }).handle(async ({ query }) => {
      const page = await paginateKeyset(db, runsQuery(db, { ...(query.status ? { status: query.status } : {}), ...(query.workflow ? { name: query.workflow } : {}), ...(query.key ? { key: query.key } : {}) }), {
        sortColumn: 'created_at',
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        map: runFromRow,
      })
      const steps = await currentSteps(db, page.items)
      return { status: 200, body: { items: page.items.map((run) => toRunView(run, steps.get(run.id))), next_cursor: page.next_cursor } }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/admin/workflow-runs/{id}',
      summary: 'One workflow run with its input, result and every step',
      tags: TAGS,
      auth: ADMIN,
      request: { params: z.object({ id: z.string().uuid('must be a workflow run id (UUID)') }) },
      responses: { 200: runDetail, 404: errorResponse('No such run') },
    }).handle(async ({ params }) => {
      const run = await getRun(db, params.id.toLowerCase())
      if (!run) throw new NotFoundError('not found', `no workflow run ${params.id}`)
      const steps = await listSteps(db, run.id)
      const current = steps.find((s) => s.stepKey === run.currentStep) ?? null
      return { status: 200, body: { ...toRunView(run, current), input: run.input, result: run.result, steps: steps.map(toStepView) } }
    }),
  ]
}
