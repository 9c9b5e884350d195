/**
 * `GET /api/v1/nodes/{id}/usage` (scope `nodes:read`): what the node's rpc-gateway endpoint
 * served over the last 24 h or 7 d, in total, by JSON-RPC method and by API key
 * (docs/rpc-gateway.md, "Usage"). The owner or an admin; another user's node answers 404 exactly
 * like a missing one.
 */
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { nodeViewQuery } from '../../nodes/views.js'
import { readNodeUsage, USAGE_WINDOWS } from '../../rpc-gateway/usage.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { callerVisibility } from '../visibility.js'
import { z } from '../zod.js'

export interface RpcUsageRouteDeps {
  db: Db
  now?: () => Date
}

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })
const count = (description: string) => z.number().int().min(0).openapi({ description })
const latency = (description: string) => z.number().min(0).nullable().openapi({ description })

const figureFields = {
  requests: count('JSON-RPC calls (a batch counts each call)'),
  errors: count('Calls answered with an error: by the node (a JSON-RPC error object), the method policy, or the gateway (node not serving, unreachable, timed out)'),
  p50_ms: latency('Median time to answer, as the upper bound of its latency bucket (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000 ms); null without calls'),
  p99_ms: latency('99th percentile, as p50_ms'),
  mean_ms: latency('Mean time to answer; null without calls'),
}

const usageSchema = z
  .object({
    node_id: z.string().uuid(),
    window: z.enum(USAGE_WINDOWS),
    window_start: timestamp.openapi({ description: 'Start of the first hour of the window (whole hours ending with the current one)' }),
    window_end: timestamp.openapi({ description: 'Now' }),
    totals: z.object(figureFields),
    methods: z.array(z.object({ method: z.string().openapi({ example: 'eth_blockNumber', description: '`other` gathers unusual names beyond 100 per key and hour' }), ...figureFields })).openapi({
      description: 'By method, most called first',
    }),
    api_keys: z.array(z.object({ api_key_id: z.string().uuid(), requests: count('JSON-RPC calls with this key'), errors: count('Of which errors') })).openapi({
      description: 'By API key (ids only), most calls first',
    }),
  })
  .openapi('NodeUsage')

const windowQuery = z.enum(USAGE_WINDOWS, { message: `must be one of ${USAGE_WINDOWS.join(', ')}` }).default('24h').openapi({ description: 'Rolling window, ending now' })

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one.
const idParams = z.object({ id: z.string() })

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no node with this id among the nodes you can see')

export function rpcUsageRoutes(deps: RpcUsageRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/nodes/{id}/usage',
      summary: "Calls to the node's JSON-RPC endpoint over 24h or 7d: totals, by method and by API key",
      description: 'Counted by the rpc-gateway per hour; the current hour includes calls up to a few seconds ago (gateways write their counts every few seconds).',
      tags: ['nodes'],
      auth: { scope: 'nodes:read' },
      request: { params: idParams, query: z.object({ window: windowQuery }) },
      responses: { 200: usageSchema, 404: errorResponse('No such node, or not yours (the same answer for both)') },
    }).handle(async ({ params, query, principal }) => {
      if (!isUuid(params.id)) throw NOT_FOUND()
      const nodeId = params.id.toLowerCase()
      const visible = (await nodeViewQuery(db, callerVisibility(principal)).where('n.id', nodeId).first('n.id')) as { id: string } | undefined
      if (!visible) throw NOT_FOUND()
      return { status: 200, body: await readNodeUsage(db, nodeId, query.window, now()) }
    }),
  ]
}
