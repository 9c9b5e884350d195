/**
 * `/api/v1/nodes` (scope `nodes:read`): a user reads the nodes of their own subscriptions; a
 * caller holding `admin` reads every node. Another user's node answers 404 with exactly the body
 * of a node that does not exist. The internal fields (provider, instance_type, host_id, host_ip,
 * region) are in no answer, for admins neither (docs/http.md, Nodes).
 */
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { APPLICATION_HEALTH_VALUES, DISPLAY_STATES, NODE_STATES, SYNC_STATUSES } from '../../nodes/states.js'
import { findNodeView, NODE_LIST_ORDER, NODE_VIEW_COLUMNS, nodeViewFromRow, nodeViewQuery, type NodeView } from '../../nodes/views.js'
import { nodeEndpoints, rpcPublicUrl } from '../../rpc-gateway/endpoints.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'
import { callerVisibility, listingScope } from '../visibility.js'

export interface NodeRouteDeps {
  db: Db
  /** The rpc-gateway's public URL (RPC_PUBLIC_URL) the endpoints are built on. */
  rpcPublicUrl?: string
}

const SCOPE = { scope: 'nodes:read' } as const
const TAGS = ['nodes']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const nodeView = z
  .object({
    id: z.string().uuid(),
    subscription_id: z.string().uuid().openapi({ description: 'A node belongs to exactly one subscription' }),
    chain_profile_id: z.string().openapi({ example: 'devnet' }),
    node_type: z.string().openapi({ example: 'full' }),
    state: z.enum(NODE_STATES).openapi({ description: 'Infrastructure state' }),
    sync_status: z.enum(SYNC_STATUSES),
    application_health: z.enum(APPLICATION_HEALTH_VALUES),
    display_state: z.enum(DISPLAY_STATES).openapi({
      description: 'Combined state: infrastructure state first, then application_health, then sync_status (docs/node-health.md)',
    }),
    binary_version: z.string().nullable().openapi({ description: 'Installed chain binary version; null until the first configuration' }),
    config_version: z.string().nullable(),
    last_heartbeat: timestamp.nullable().openapi({ description: 'Last agent heartbeat' }),
    last_migration_triggered_at: timestamp.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
    endpoints: z
      .object({
        http: z.string().url().openapi({ example: 'https://rpc.example.com/v1/0190c3a2-7c1e-7cc0-9c6e-2f6f0d5c1a11' }),
        ws: z.string().url().openapi({ example: 'wss://rpc.example.com/v1/0190c3a2-7c1e-7cc0-9c6e-2f6f0d5c1a11' }),
      })
      .openapi({
        description:
          "The node's JSON-RPC endpoint through the rpc-gateway: an API key with scope nodes:rpc in X-API-Key or Authorization: Bearer, or appended as a last path segment (docs/rpc-gateway.md)",
      }),
  })
  .openapi('Node')

const uuidFilter = (what: string) => z.string().uuid(`must be a ${what} id (UUID)`)

const listQuery = paginationQuery.extend({
  subscription_id: uuidFilter('subscription').optional().openapi({ description: 'Only the node(s) of this subscription' }),
  state: z.enum(NODE_STATES).optional().openapi({ description: 'Only nodes in this infrastructure state' }),
  user_id: uuidFilter('user').optional().openapi({ description: 'Admin only: the nodes of this user; a user may give only their own id' }),
})

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one (checked in the handler).
const idParams = z.object({ id: z.string() })

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no node with this id among the nodes you can see')


export function nodeRoutes(deps: NodeRouteDeps): ApiRoute[] {
  const { db } = deps
  const publicUrl = deps.rpcPublicUrl ?? rpcPublicUrl({})
  // The view is fresh from nodeViewFromRow: adding to it spares a copy of every row of a page.
  const withEndpoints = (node: NodeView) => Object.assign(node, { endpoints: nodeEndpoints(publicUrl, node.id) })
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/nodes',
      summary: "List nodes, newest first: the caller's own, or every node for an admin",
      tags: TAGS,
      auth: SCOPE,
      request: { query: listQuery },
      responses: {
        200: pageSchema(nodeView).openapi('NodePage'),
        403: errorResponse('The credential lacks nodes:read, or a non-admin filters by another user'),
      },
    }).handle(async ({ query, principal }) => {
      const { visibility, userId } = listingScope(principal, query.user_id, 'nodes')
      const filters = { subscriptionId: query.subscription_id?.toLowerCase(), state: query.state, userId }
      const page = await paginateKeyset(db, nodeViewQuery(db, visibility, filters), {
        ...NODE_LIST_ORDER,
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: NODE_VIEW_COLUMNS,
        map: (row: Record<string, unknown>) => withEndpoints(nodeViewFromRow(row)),
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/nodes/{id}',
      summary: 'One node of the caller (any node for an admin)',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams },
      responses: { 200: nodeView, 404: errorResponse('No such node, or not yours (the same answer for both)') },
    }).handle(async ({ params, principal }) => {
      if (!isUuid(params.id)) throw NOT_FOUND()
      const node = await findNodeView(db, callerVisibility(principal), params.id.toLowerCase())
      if (!node) throw NOT_FOUND()
      return { status: 200, body: withEndpoints(node) }
    }),
  ]
}
