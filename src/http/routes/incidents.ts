/**
 * `/api/v1/incidents` (docs/incidents.md, "API"): reading with `nodes:read`, acknowledging and
 * resolving with `nodes:write`. A user sees the incidents routed to them (`user_id`, resolved
 * from the node's subscription); an admin sees every incident and may narrow to one user.
 * Another user's incident answers 404 with exactly the body of one that does not exist.
 */
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { findIncident, INCIDENT_COLUMNS, INCIDENT_LIST_ORDER, incidentFromRow, incidentQuery, moveIncident } from '../../health/incident-store.js'
import { INCIDENT_CATEGORIES, INCIDENT_SEVERITIES, INCIDENT_STATUSES } from '../../health/incident-rules.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { callerVisibility, listingScope } from '../visibility.js'
import { z } from '../zod.js'

export interface IncidentRouteDeps {
  db: Db
  now?: () => Date
}

const TAGS = ['incidents']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const incidentView = z
  .object({
    id: z.string().uuid(),
    node_id: z.string().uuid().openapi({ description: 'No foreign key: the incident outlives its node' }),
    subscription_id: z.string().uuid(),
    user_id: z.string().uuid().nullable().openapi({ description: "The subscription's owner when the incident was raised; null if it was already gone" }),
    chain_profile_id: z.string().openapi({ example: 'devnet' }),
    category: z.enum(INCIDENT_CATEGORIES),
    severity: z.enum(INCIDENT_SEVERITIES),
    status: z.enum(INCIDENT_STATUSES),
    title: z.string(),
    description: z.string(),
    metadata: z.record(z.unknown()).openapi({ description: 'Trigger-specific context: the health change (dimension, from, to, writer, reason) or the rollout; `last_occurrence` after a repeat' }),
    occurrence_count: z.number().int(),
    first_seen_at: timestamp,
    last_seen_at: timestamp,
    acknowledged_at: timestamp.nullable(),
    acknowledged_by: z.string().nullable().openapi({ description: 'User id of who acknowledged it' }),
    resolved_at: timestamp.nullable(),
    resolved_by: z.string().nullable().openapi({ description: 'User id for a manual resolution; `auto` when the node recovered; `auto:node_gone` when the node was deleted or terminated' }),
    escalated_at: timestamp.nullable().openapi({ description: 'When its severity rose (a warning left open too long)' }),
    is_flapping: z.boolean().openapi({ description: 'Keeps coming back: notifications are held back and it does not auto-resolve until it has been quiet' }),
    resolution_debounce: z.number().int().openapi({ description: 'Consecutive evaluation cycles the node has been recovered; auto-resolves at INCIDENT_RESOLUTION_DEBOUNCE' }),
    version: z.number().int(),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .openapi('Incident')

/** What a move answers: the incident as it is now, and whether this call moved it. */
const movedIncidentView = incidentView
  .extend({ changed: z.boolean().openapi({ description: 'false for a repeat (already where the move puts it); of two moves at once, exactly one is true' }) })
  .openapi('MovedIncident')

const listQuery = paginationQuery.extend({
  status: z.enum(INCIDENT_STATUSES).optional(),
  severity: z.enum(INCIDENT_SEVERITIES).optional(),
  category: z.enum(INCIDENT_CATEGORIES).optional(),
  node_id: z.string().uuid('must be a node id (UUID)').optional().openapi({ description: 'Only the incidents of this node' }),
  user_id: z.string().uuid('must be a user id (UUID)').optional().openapi({ description: 'Admin only: the incidents of this user; a user may give only their own id' }),
})

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one.
const idParams = z.object({ id: z.string() })

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no incident with this id among the incidents you can see')
const NOT_FOUND_404 = errorResponse('No such incident, or not yours (the same answer for both)')
const CONFLICT_409 = errorResponse('The incident is not in a status this move starts from (spec "Incident status"), or it changed meanwhile')

export function incidentRoutes(deps: IncidentRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())

  const move = (to: 'acknowledged' | 'resolved') => async ({ params, principal }: { params: { id: string }; principal: Parameters<typeof callerVisibility>[0] }) => {
    if (!isUuid(params.id)) throw NOT_FOUND()
    const incident = await db.transaction((trx) => moveIncident(trx, { id: params.id.toLowerCase(), to, by: principal.userId, visibility: callerVisibility(principal), now: now() }))
    return { status: 200 as const, body: incident }
  }

  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/incidents',
      summary: "List incidents, newest first: the caller's own, or every incident for an admin",
      tags: TAGS,
      auth: { scope: 'nodes:read' },
      request: { query: listQuery },
      responses: {
        200: pageSchema(incidentView).openapi('IncidentPage'),
        403: errorResponse('The credential lacks nodes:read, or a non-admin filters by another user'),
      },
    }).handle(async ({ query, principal }) => {
      const { visibility, userId } = listingScope(principal, query.user_id, 'incidents')
      const filters = { status: query.status, severity: query.severity, category: query.category, nodeId: query.node_id?.toLowerCase(), userId }
      const page = await paginateKeyset(db, incidentQuery(db, visibility, filters), {
        ...INCIDENT_LIST_ORDER,
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: INCIDENT_COLUMNS,
        map: incidentFromRow,
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/incidents/{id}',
      summary: 'One incident of the caller (any incident for an admin)',
      tags: TAGS,
      auth: { scope: 'nodes:read' },
      request: { params: idParams },
      responses: { 200: incidentView, 404: NOT_FOUND_404 },
    }).handle(async ({ params, principal }) => {
      if (!isUuid(params.id)) throw NOT_FOUND()
      const incident = await findIncident(db, callerVisibility(principal), params.id.toLowerCase())
      if (!incident) throw NOT_FOUND()
      return { status: 200, body: incident }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/incidents/{id}/acknowledge',
      summary: 'Acknowledge an open incident (someone is on it)',
      description: 'open -> acknowledged. An acknowledged incident is answered unchanged with `changed: false` (a repeat); a resolved or auto_resolved one answers 409. An acknowledged incident still auto-resolves when the node recovers.',
      tags: TAGS,
      auth: { scope: 'nodes:write' },
      request: { params: idParams },
      responses: { 200: movedIncidentView, 404: NOT_FOUND_404, 409: CONFLICT_409 },
    }).handle(move('acknowledged')),

    defineRoute({
      method: 'post',
      path: '/api/v1/incidents/{id}/resolve',
      summary: 'Resolve an open or acknowledged incident by hand',
      description: 'open or acknowledged -> resolved. A resolved incident is answered unchanged with `changed: false` (a repeat); an auto_resolved one answers 409. The owner gets a notification unless the incident is flapping.',
      tags: TAGS,
      auth: { scope: 'nodes:write' },
      request: { params: idParams },
      responses: { 200: movedIncidentView, 404: NOT_FOUND_404, 409: CONFLICT_409 },
    }).handle(move('resolved')),
  ]
}
