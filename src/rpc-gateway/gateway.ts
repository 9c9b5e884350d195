/**
 * The rpc-gateway's HTTP handler (docs/rpc-gateway.md). One request:
 *
 * 1. `POST /v1/{node_id}` or `/v1/{node_id}/{key}`; `/health`, `/readyz`, `/metrics` beside it.
 * 2. The caller's API key (caller.ts): 401 without a valid one, 403 without `nodes:rpc`.
 * 3. The body, at most RPC_GATEWAY_BODY_LIMIT_BYTES (413), JSON (400), a batch of at most
 *    RPC_GATEWAY_MAX_BATCH calls (400).
 * 4. The key's rate (rate-limit.ts): one token per call, 429 with Retry-After.
 * 5. The node's route (route-table.ts): another user's node or none is 404; a node not serving
 *    is 503 with Retry-After.
 * 6. The method policy: refused calls are answered here (HTTP 200, a JSON-RPC error each); the
 *    others go to the node in one request, and the answers are put back in the caller's order.
 *    A single read-only call joins an identical one already on its way to the node, and
 *    `eth_chainId`/`net_version` are answered from memory once known (merge.ts).
 * 7. Usage: each call is counted (usage.ts) by node, key and method, with its error and latency.
 *
 * Every refusal is a JSON-RPC error object. The access log never carries the path's key.
 */
import type http from 'node:http'
import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import type { Metrics } from '../metrics.js'
import type { GatewayMetrics } from './metrics.js'
import { identifyCaller } from './caller.js'
import { errorResponse, isErrorResponse, parseBody, RPC_ERROR, type JsonRpcCall, type JsonRpcErrorResponse, type JsonRpcId } from './json-rpc.js'
import type { RpcRateLimiter } from './rate-limit.js'
import { CACHED_METHODS, createInFlightReads, mergeKey, resultOf, type ChainIdCache } from './merge.js'
import { SERVING_STATES, upstreamAuthorization, type NodeRoute, type RouteTable } from './route-table.js'
import { UpstreamError, type UpstreamClient, type UpstreamResponse } from './upstream.js'
import type { UpstreamHealthRecorder } from './upstream-health.js'
import type { UsageRecorder } from './usage.js'

export interface RpcGatewayDeps {
  db: Db
  routes: RouteTable
  limiter: RpcRateLimiter
  upstream: UpstreamClient
  logger: Logger
  metrics: Metrics
  /** Usage on /metrics, shared with the WebSocket proxy. */
  usageMetrics: GatewayMetrics
  bodyLimitBytes: number
  maxBatch: number
  /** `eth_chainId`/`net_version` answers; the daemon drops a node's entry when its route changes. */
  chainIds: ChainIdCache
  /** Durable usage (rpc_usage); none: only /metrics counts. */
  usage?: UsageRecorder
  /** Calls to each node answered or failed (rpc_upstream_health), a health signal; none: not recorded. */
  upstreamHealth?: UpstreamHealthRecorder
  now?: () => Date
}

/** Retry-After of a node that is not serving: long enough not to hammer, short enough to catch the end of a migration. */
const NOT_SERVING_RETRY_AFTER_SECONDS = 5

const ENDPOINT = /^\/v1\/([^/]+)(?:\/([^/]+))?\/?$/
const SYSTEM_PATHS = new Set(['/health', '/readyz', '/metrics'])

function safeDecode(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment)
  } catch {
    return undefined
  }
}

class Refusal {
  constructor(
    readonly status: number,
    readonly body: JsonRpcErrorResponse,
    readonly headers: Record<string, string> = {},
  ) {}
}

function refuse(status: number, code: number, message: string, headers: Record<string, string> = {}, id: JsonRpcId = null): Refusal {
  return new Refusal(status, errorResponse(id, code, message), headers)
}

const NOT_SERVING: Partial<Record<string, string>> = {
  provisioning: 'is still being provisioned',
  maintenance: 'is in maintenance (an upgrade or a migration); it serves again when that ends',
  down: 'is down; the service is restoring it',
  terminating: 'is being terminated',
  terminated: 'has been terminated and will not serve again',
  failed: 'failed and will not serve again',
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | Refusal> {
  const tooLarge = () => refuse(413, RPC_ERROR.invalidRequest, `request body too large: at most ${limit} bytes`)
  const declared = Number(req.headers['content-length'])
  if (Number.isFinite(declared) && declared > limit) return Promise.resolve(tooLarge())
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let done = false
    req.on('data', (chunk: Buffer) => {
      if (done) return
      size += chunk.length
      if (size > limit) {
        done = true
        // Stop reading; the answer closes the connection.
        req.pause()
        resolve(tooLarge())
        return
      }
      chunks.push(chunk)
    })
    req.on('end', () => {
      if (!done) resolve(Buffer.concat(chunks))
    })
    req.on('error', reject)
  })
}

function send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body))
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length, ...headers })
  res.end(bytes)
}

interface Usage {
  nodeId: string
  apiKeyId: string
  calls: number
  methods: string[]
  /** Per call, whether its answer was an error; unset: decided by the HTTP status alone. */
  callErrors?: boolean[]
}

/** Answers larger than this are not parsed for usage: a JSON-RPC error is small, so a large answer counts as a success. */
const USAGE_PARSE_LIMIT_BYTES = 256 * 1024

/** Which of `count` calls the node answered with an error object. */
function answerErrors(answer: UpstreamResponse, count: number): boolean[] {
  if (answer.status >= 400) return new Array<boolean>(count).fill(true)
  if (answer.body.length > USAGE_PARSE_LIMIT_BYTES) return new Array<boolean>(count).fill(false)
  let parsed: unknown
  try {
    parsed = JSON.parse(answer.body.toString('utf8'))
  } catch {
    return new Array<boolean>(count).fill(true)
  }
  const isError = (value: unknown) => typeof value !== 'object' || value === null || 'error' in value
  if (Array.isArray(parsed)) return Array.from({ length: count }, (_, i) => isError(parsed[i]))
  return new Array<boolean>(count).fill(isError(parsed))
}

export function createRpcHandler(deps: RpcGatewayDeps): (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void> {
  const now = deps.now ?? (() => new Date())
  const usage = deps.usageMetrics
  const inFlight = createInFlightReads()

  /** One single call: from the chain-id cache, joined to an identical read on its way, or sent. */
  async function answerSingle(route: NodeRoute, call: JsonRpcCall, body: Buffer): Promise<UpstreamResponse> {
    const url = route.upstream?.url
    const cacheable = url !== undefined && CACHED_METHODS.has(call.method)
    if (cacheable) {
      const hit = deps.chainIds.get(route.nodeId, url, call.method)
      if (hit) {
        usage.cached.inc({ node_id: route.nodeId })
        return { status: 200, contentType: 'application/json', body: Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: hit.result })) }
      }
    }
    const key = url === undefined ? undefined : mergeKey(url, call)
    const answer = key ? await inFlight.run(key, call.id, () => forward(route, body), () => usage.merged.inc({ node_id: route.nodeId })) : await forward(route, body)
    if (cacheable) {
      const known = resultOf(answer)
      if (known) deps.chainIds.set(route.nodeId, url, call.method, known.result)
    }
    return answer
  }

  async function forward(route: NodeRoute, body: Buffer): Promise<UpstreamResponse> {
    let current = route
    for (let attempt = 0; ; attempt++) {
      if (!current.upstream) throw refuse(503, RPC_ERROR.nodeNotServing, `node ${route.nodeId} has no RPC address yet; retry shortly`, { 'Retry-After': String(NOT_SERVING_RETRY_AFTER_SECONDS) })
      try {
        const answer = await deps.upstream.post(current.upstream.url, body, await upstreamAuthorization(current.upstream))
        // A cookie kept since before the chain restarted: read the new one, once.
        if (answer.status === 401 && current.upstream.cookie && attempt === 0) {
          current.upstream.cookie.forget()
          continue
        }
        deps.upstreamHealth?.record(route.nodeId, true)
        return answer
      } catch (err) {
        if (!(err instanceof UpstreamError)) throw err
        // The route may be stale (the node moved before the event reached us): read it again, once.
        let fresh: NodeRoute | undefined
        if (err.kind === 'unreachable' && attempt === 0) {
          deps.routes.invalidate(route.nodeId)
          fresh = await deps.routes.get(route.nodeId)
        }
        if (!fresh || fresh.upstream?.url === current.upstream.url || !SERVING_STATES.includes(fresh.state)) {
          deps.upstreamHealth?.record(route.nodeId, false)
          throw err
        }
        current = fresh
      }
    }
  }

  async function serveRpc(req: http.IncomingMessage, res: http.ServerResponse, nodeId: string, pathKey: string | undefined, record: (u: Usage) => Usage): Promise<number> {
    if (req.method !== 'POST') {
      throw refuse(405, RPC_ERROR.invalidRequest, `${req.method ?? 'this method'} is not served here: send JSON-RPC with POST`, { Allow: 'POST' })
    }
    const who = await identifyCaller(deps.db, req.headers, pathKey, now())
    if (!who.ok) throw refuse(who.status, who.status === 401 ? RPC_ERROR.unauthorized : RPC_ERROR.forbidden, who.message)
    const body = await readBody(req, deps.bodyLimitBytes)
    if (body instanceof Refusal) throw body
    const parsed = parseBody(body, deps.maxBatch)
    if (parsed.kind === 'invalid') throw new Refusal(parsed.status, parsed.response)
    const calls = parsed.kind === 'single' ? [parsed.call] : parsed.calls
    const decision = await deps.limiter.take(`key:${who.caller.apiKeyId}`, calls.length)
    if (!decision.allowed) {
      throw refuse(429, RPC_ERROR.limitExceeded, `rate limit exceeded: too many requests for this API key; retry in ${decision.retryAfterSeconds} s`, {
        'Retry-After': String(decision.retryAfterSeconds),
      })
    }
    const route = await deps.routes.get(nodeId)
    // Another user's node is answered exactly as one that does not exist.
    if (!route || route.ownerId !== who.caller.userId) throw refuse(404, RPC_ERROR.nodeNotFound, 'node not found: no node with this id among your nodes')
    const used = record({
      nodeId: route.nodeId,
      apiKeyId: who.caller.apiKeyId,
      calls: calls.length,
      methods: calls.map((call) => (isErrorResponse(call) ? 'invalid' : call.method)),
    })
    if (!SERVING_STATES.includes(route.state)) {
      throw refuse(503, RPC_ERROR.nodeNotServing, `node ${route.nodeId} is not serving: it ${NOT_SERVING[route.state] ?? `is ${route.state}`}`, {
        'Retry-After': String(NOT_SERVING_RETRY_AFTER_SECONDS),
      })
    }

    if (parsed.kind === 'single') {
      const reason = route.policy.check(parsed.call.method)
      if (reason) {
        used.callErrors = [true]
        throw refuse(200, RPC_ERROR.methodNotAllowed, reason, {}, parsed.call.id)
      }
      const answer = await answerSingle(route, parsed.call, body)
      used.callErrors = answerErrors(answer, 1)
      send(res, answer.status, answer.body, answer.contentType ? { 'content-type': answer.contentType } : {})
      return answer.status
    }

    // A batch: refusals answered here in place, the rest sent on in one request.
    const answers: Array<unknown> = new Array(parsed.calls.length)
    const passing: Array<{ index: number; call: JsonRpcCall }> = []
    parsed.calls.forEach((call, index) => {
      if (isErrorResponse(call)) answers[index] = call
      else {
        const reason = route.policy.check(call.method)
        if (reason) answers[index] = errorResponse(call.id, RPC_ERROR.methodNotAllowed, reason)
        else passing.push({ index, call })
      }
    })
    if (passing.length === parsed.calls.length) {
      const answer = await forward(route, body)
      used.callErrors = answerErrors(answer, parsed.calls.length)
      send(res, answer.status, answer.body, answer.contentType ? { 'content-type': answer.contentType } : {})
      return answer.status
    }
    if (passing.length > 0) {
      const answer = await forward(route, Buffer.from(JSON.stringify(passing.map((p) => p.call.raw))))
      let results: unknown
      try {
        results = JSON.parse(answer.body.toString('utf8'))
      } catch {
        results = undefined
      }
      passing.forEach((p, i) => {
        answers[p.index] = Array.isArray(results) && results[i] !== undefined ? results[i] : errorResponse(p.call.id, RPC_ERROR.internal, `the node answered the batch with HTTP ${answer.status} and no result for this call`)
      })
    }
    used.callErrors = answers.map((answer) => typeof answer !== 'object' || answer === null || 'error' in answer)
    send(res, 200, answers)
    return 200
  }

  async function serveSystem(req: http.IncomingMessage, res: http.ServerResponse, path: string): Promise<number | undefined> {
    if (req.method !== 'GET') return undefined
    if (path === '/health') {
      send(res, 200, { status: 'healthy' })
      return 200
    }
    if (path === '/readyz') {
      try {
        await deps.db.raw('select 1')
        send(res, 200, { status: 'ready', components: { database: { status: 'up' } } })
        return 200
      } catch (err) {
        send(res, 503, { status: 'not ready', components: { database: { status: 'down', error: (err as Error).message.slice(0, 200) } } })
        return 503
      }
    }
    if (path === '/metrics') {
      const text = await deps.metrics.registry.metrics()
      res.writeHead(200, { 'content-type': deps.metrics.registry.contentType })
      res.end(text)
      return 200
    }
    return undefined
  }

  return async (req, res) => {
    const started = process.hrtime.bigint()
    const path = (req.url ?? '/').split('?')[0] as string
    const endpoint = ENDPOINT.exec(path)
    // The route template, and the only form of the path that is logged: the key is never written down.
    const system = SYSTEM_PATHS.has(path)
    const template = endpoint ? (endpoint[2] !== undefined ? '/v1/{node_id}/{key}' : '/v1/{node_id}') : system ? path : 'unmatched'
    let status = 500
    let used: Usage | undefined
    try {
      const nodeId = endpoint ? safeDecode(endpoint[1] as string) : undefined
      const pathKey = endpoint?.[2] !== undefined ? safeDecode(endpoint[2]) : undefined
      if (endpoint && nodeId !== undefined && (endpoint[2] === undefined || pathKey !== undefined)) status = await serveRpc(req, res, nodeId, pathKey, (u) => (used = u))
      else if (endpoint) throw refuse(404, RPC_ERROR.nodeNotFound, 'node not found: the path is not a node endpoint')
      else {
        const served = await serveSystem(req, res, path)
        if (served === undefined) throw refuse(404, RPC_ERROR.invalidRequest, 'not found: node endpoints are POST /v1/{node_id}')
        status = served
      }
    } catch (err) {
      const refusal =
        err instanceof Refusal
          ? err
          : err instanceof UpstreamError
            ? err.kind === 'timeout'
              ? refuse(504, RPC_ERROR.upstreamUnavailable, `the node did not answer in time (${err.message})`)
              : refuse(502, RPC_ERROR.upstreamUnavailable, `the node's RPC is unreachable right now; retry shortly`, { 'Retry-After': '1' })
            : undefined
      if (!refusal) deps.logger.error({ err, route: template }, 'rpc gateway: unexpected error')
      const answer = refusal ?? refuse(500, RPC_ERROR.internal, 'internal error')
      status = answer.status
      if (!res.headersSent) send(res, answer.status, answer.body, answer.status === 413 ? { ...answer.headers, Connection: 'close' } : answer.headers)
    } finally {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9
      const labels = { method: req.method ?? 'OTHER', route: template, status: String(status) }
      deps.metrics.httpRequestsTotal.inc(labels)
      deps.metrics.httpRequestDurationSeconds.observe(labels, seconds)
      if (used) {
        const outcome = status >= 500 ? 'error' : status >= 400 ? 'refused' : 'ok'
        usage.requests.inc({ node_id: used.nodeId, api_key_id: used.apiKeyId, outcome })
        usage.calls.inc({ node_id: used.nodeId, api_key_id: used.apiKeyId }, used.calls)
        usage.duration.observe({ node_id: used.nodeId }, seconds)
        if (deps.usage) {
          const at = now().getTime()
          const latencyMs = seconds * 1000
          for (let i = 0; i < used.methods.length; i++) {
            const error = status >= 400 || (used.callErrors?.[i] ?? false)
            deps.usage.record({ nodeId: used.nodeId, apiKeyId: used.apiKeyId, method: used.methods[i] as string, error, latencyMs, at })
          }
        }
      }
      // Answered calls are counted (usage, /metrics), not written line by line at the default
      // level: at thousands of calls a second the lines cost more than the calls (docs/rpc-gateway.md).
      const level = status >= 500 ? 'warn' : endpoint && status >= 400 ? 'info' : 'debug'
      if (deps.logger.isLevelEnabled(level)) {
        deps.logger[level]({ method: req.method, path: endpoint ? `/v1/${endpoint[1]}${endpoint[2] !== undefined ? '/<key>' : ''}` : template, status, durationMs: Math.round(seconds * 1e5) / 100 }, 'request answered')
      }
    }
  }
}
