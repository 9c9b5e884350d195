/**
 * Uptime (spec: the uptime endpoints; docs/uptime.md), scope `nodes:read`:
 * `/api/v1/nodes/{id}/uptime` (rolling summary) and `/api/v1/nodes/{id}/uptime/history`
 * (per-period breakdown) for one node, and `/api/v1/uptime` (the caller's nodes, every node for
 * an admin, with all three windows and 30 days of daily periods) for fleet reports. Another
 * user's node answers 404 exactly like a missing one.
 */
import type { Visibility } from '../../auth/scopes.js'
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { DISPLAY_STATES, NODE_STATES } from '../../nodes/states.js'
import { NODE_LIST_ORDER, NODE_VIEW_COLUMNS, nodeViewFromRow, nodeViewQuery, type NodeView } from '../../nodes/views.js'
import { readUptimeHistory, readUptimeReports, readUptimeSummary, UPTIME_GRANULARITIES, UPTIME_WINDOWS } from '../../uptime/reads.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { callerVisibility, listingScope } from '../visibility.js'
import { z } from '../zod.js'

export interface UptimeRouteDeps {
  db: Db
  now?: () => Date
}

const SCOPE = { scope: 'nodes:read' } as const
const TAGS = ['uptime']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })
const seconds = (description: string) => z.number().int().min(0).openapi({ description })

const figureFields = {
  uptime_percentage: z.number().min(0).max(100).nullable().openapi({
    description: 'uptime / (uptime + downtime) x 100, cut (never rounded up) to 3 decimals; null when the period holds no up or down time',
    example: 99.95,
  }),
  uptime_seconds: seconds('Seconds counted as up (healthy, degraded, provisioning within its 10-minute grace)'),
  downtime_seconds: seconds('Seconds counted as down (down, maintenance, provisioning past its grace); the SLA figure counts all of them'),
  planned_downtime_seconds: seconds('The part of downtime_seconds that was planned maintenance: the node in maintenance for a rollout an operator started'),
  unplanned_downtime_seconds: seconds('downtime_seconds less planned_downtime_seconds: failures, migrations, provisioning past its grace'),
  unknown_seconds: seconds('Seconds counted neither way (syncing, terminating)'),
  total_seconds: seconds('All seconds the node existed in the period'),
}

const windowQuery = z.enum(UPTIME_WINDOWS, { message: `must be one of ${UPTIME_WINDOWS.join(', ')}` }).default('24h').openapi({ description: 'Rolling window, ending now' })

const summarySchema = z
  .object({
    node_id: z.string().uuid(),
    window: z.enum(UPTIME_WINDOWS),
    window_start: timestamp.openapi({ description: 'Start of the first hour of the window (the window is whole hours ending with the current one)' }),
    window_end: timestamp.openapi({ description: 'Now' }),
    ...figureFields,
  })
  .openapi('UptimeSummary')

const periodSchema = z.object({ period_start: timestamp, period_end: timestamp, ...figureFields }).openapi('UptimePeriod')

const historySchema = z
  .object({
    node_id: z.string().uuid(),
    window: z.enum(UPTIME_WINDOWS),
    granularity: z.enum(UPTIME_GRANULARITIES),
    window_start: timestamp,
    window_end: timestamp,
    periods: z.array(periodSchema).openapi({ description: 'Oldest first; every hour (or UTC day, the first cut at window_start) of the window, empty ones included' }),
  })
  .openapi('UptimeHistory')

const windowFigures = z.object({ window_start: timestamp, ...figureFields })

const fleetItem = z
  .object({
    node_id: z.string().uuid(),
    subscription_id: z.string().uuid(),
    chain_profile_id: z.string(),
    node_type: z.string(),
    state: z.enum(NODE_STATES),
    display_state: z.enum(DISPLAY_STATES),
    windows: z.object({ '24h': windowFigures, '7d': windowFigures, '30d': windowFigures }),
    daily: z.array(periodSchema).openapi({ description: 'The 30d window by UTC day, oldest first' }),
  })
  .openapi('NodeUptimeReport')

const fleetQuery = paginationQuery.extend({
  user_id: z.string().uuid('must be a user id (UUID)').optional().openapi({ description: 'Admin only: the nodes of this user' }),
})

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one.
const idParams = z.object({ id: z.string() })

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no node with this id among the nodes you can see')

async function visibleNodeId(db: Db, visibility: Visibility, id: string): Promise<string> {
  if (!isUuid(id)) throw NOT_FOUND()
  const nodeId = id.toLowerCase()
  const row = (await nodeViewQuery(db, visibility).where('n.id', nodeId).first('n.id')) as { id: string } | undefined
  if (!row) throw NOT_FOUND()
  return nodeId
}

export function uptimeRoutes(deps: UptimeRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/nodes/{id}/uptime',
      summary: 'Rolling uptime of one node over 24h, 7d or 30d',
      description: 'Sums the hourly buckets of the window plus the current hour, computed from the state log at read time.',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams, query: z.object({ window: windowQuery }) },
      responses: { 200: summarySchema, 404: errorResponse('No such node, or not yours (the same answer for both)') },
    }).handle(async ({ params, query, principal }) => {
      const nodeId = await visibleNodeId(db, callerVisibility(principal), params.id)
      return { status: 200, body: await readUptimeSummary(db, nodeId, query.window, now()) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/nodes/{id}/uptime/history',
      summary: 'Uptime of one node per hour or per UTC day over 24h, 7d or 30d',
      tags: TAGS,
      auth: SCOPE,
      request: {
        params: idParams,
        query: z.object({
          window: windowQuery,
          granularity: z.enum(UPTIME_GRANULARITIES, { message: `must be one of ${UPTIME_GRANULARITIES.join(', ')}` }).default('hourly').openapi({ description: 'One period per hour or per UTC day' }),
        }),
      },
      responses: { 200: historySchema, 404: errorResponse('No such node, or not yours (the same answer for both)') },
    }).handle(async ({ params, query, principal }) => {
      const nodeId = await visibleNodeId(db, callerVisibility(principal), params.id)
      return { status: 200, body: await readUptimeHistory(db, nodeId, query.window, query.granularity, now()) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/uptime',
      summary: "Uptime report of the caller's nodes (every node for an admin), newest node first",
      description: 'Each node with its 24h, 7d and 30d figures and its 30 days by UTC day; cursor-paginated like /api/v1/nodes.',
      tags: TAGS,
      auth: SCOPE,
      request: { query: fleetQuery },
      responses: {
        200: pageSchema(fleetItem).openapi('NodeUptimeReportPage'),
        403: errorResponse('The credential lacks nodes:read, or a non-admin asks for another user'),
      },
    }).handle(async ({ query, principal }) => {
      const { visibility, userId } = listingScope(principal, query.user_id, 'nodes')
      const page = await paginateKeyset<NodeView>(db, nodeViewQuery(db, visibility, { userId }), {
        ...NODE_LIST_ORDER,
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: NODE_VIEW_COLUMNS,
        map: nodeViewFromRow,
      })
      const reports = await readUptimeReports(db, page.items.map((n) => n.id), now())
      const items = page.items.map((n) => {
        const report = reports.get(n.id)
        if (!report) throw new Error(`no uptime report computed for node ${n.id}`)
        return { node_id: n.id, subscription_id: n.subscription_id, chain_profile_id: n.chain_profile_id, node_type: n.node_type, state: n.state, display_state: n.display_state, ...report }
      })
      return { status: 200, body: { items, next_cursor: page.next_cursor } }
    }),
  ]
}
