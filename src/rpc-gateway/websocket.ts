/**
 * WebSocket pass-through (docs/rpc-gateway.md, "WebSocket"): `ws(s)://{rpc_url}/v1/{node_id}`
 * (key in a header or the path, as over HTTP) is joined to a WebSocket on the node's RPC, so
 * `eth_subscribe` (newHeads, logs) notifications flow straight back. Each frame the client sends
 * goes through the method policy and the per-connection subscription limit first.
 *
 * Every call in a frame takes a token from the key's rate limit, the same bucket as its HTTP
 * calls (a call over the limit is answered with the limit error and not sent on), and is counted
 * in the key's usage and on /metrics when the node answers it (latency from the frame to the
 * answer with its id); calls the gateway refuses are counted on /metrics as `refused`.
 * Frames of one connection are handled in order.
 *
 * A connection is closed by the gateway (code 1012, "service restart": clients reconnect) when
 * the node's route changes (a health event: moved, or no longer serving), and with 4401 when its
 * key stops being valid (checked every `keyRecheckMs` and at the next frame after that).
 */
import type http from 'node:http'
import type { Duplex } from 'node:stream'
import WebSocket, { WebSocketServer, type RawData } from 'ws'
import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import { identifyCaller } from './caller.js'
import { errorResponse, isErrorResponse, parseBody, RPC_ERROR, type JsonRpcCall, type JsonRpcErrorResponse, type JsonRpcId } from './json-rpc.js'
import type { GatewayMetrics, WebSocketCallOutcome } from './metrics.js'
import type { RpcRateLimiter } from './rate-limit.js'
import { SERVING_STATES, upstreamAuthorization, type RouteTable } from './route-table.js'
import type { UsageRecorder } from './usage.js'

export const CLOSE_NODE_CHANGED = 1012
export const CLOSE_KEY_INVALID = 4401

export interface WebSocketProxyOptions {
  db: Db
  routes: RouteTable
  logger: Logger
  maxPayloadBytes: number
  maxBatch: number
  maxSubscriptions: number
  keyRecheckMs: number
  /** The keys' rate limit, shared with the HTTP calls; none: frames are not limited. */
  limiter?: RpcRateLimiter
  /** Durable usage (rpc_usage); none: frames are not counted there. */
  usage?: UsageRecorder
  /** Usage on /metrics, shared with the HTTP handler; none: frames are not counted there. */
  metrics?: GatewayMetrics
  now?: () => Date
}

/** Calls sent on and not answered yet, per connection, at most (a client that never reads its answers cannot grow it). */
const MAX_PENDING_CALLS = 1_000

interface Connection {
  nodeId: string
  upstreamUrl: string
  client: WebSocket
  upstream: WebSocket
}

const ENDPOINT = /^\/v1\/([^/]+)(?:\/([^/]+))?\/?$/

function refuseUpgrade(socket: Duplex, status: number, reason: string, code: number, message: string): void {
  const body = JSON.stringify(errorResponse(null, code, message))
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
}

export function createWebSocketProxy(options: WebSocketProxyOptions) {
  const now = options.now ?? (() => new Date())
  const wss = new WebSocketServer({ noServer: true, maxPayload: options.maxPayloadBytes })
  const byNode = new Map<string, Set<Connection>>()

  const forget = (conn: Connection) => {
    const set = byNode.get(conn.nodeId)
    set?.delete(conn)
    if (set && set.size === 0) byNode.delete(conn.nodeId)
  }

  async function accept(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const match = ENDPOINT.exec((req.url ?? '/').split('?')[0] as string)
    if (!match) return refuseUpgrade(socket, 404, 'Not Found', RPC_ERROR.invalidRequest, 'not found: node endpoints are /v1/{node_id}')
    const nodeId = match[1] as string
    const pathKey = match[2]
    // The only form of the path written down: the key never is.
    const logged = { path: `/v1/${nodeId}${pathKey !== undefined ? '/<key>' : ''}` }
    const who = await identifyCaller(options.db, req.headers, pathKey, now())
    if (!who.ok) options.logger.info({ ...logged, status: who.status }, 'websocket refused')
    if (!who.ok) return refuseUpgrade(socket, who.status, who.status === 401 ? 'Unauthorized' : 'Forbidden', who.status === 401 ? RPC_ERROR.unauthorized : RPC_ERROR.forbidden, who.message)
    const route = await options.routes.get(nodeId)
    if (!route || route.ownerId !== who.caller.userId) return refuseUpgrade(socket, 404, 'Not Found', RPC_ERROR.nodeNotFound, 'node not found: no node with this id among your nodes')
    if (!SERVING_STATES.includes(route.state) || !route.upstream) {
      return refuseUpgrade(socket, 503, 'Service Unavailable', RPC_ERROR.nodeNotServing, `node ${route.nodeId} is not serving (${route.state}); retry shortly`)
    }
    const upstreamUrl = route.upstream.url.replace(/^http/, 'ws')
    const authorization = await upstreamAuthorization(route.upstream)
    const upstream = new WebSocket(upstreamUrl, { headers: authorization ? { authorization } : {}, handshakeTimeout: 10_000 })
    try {
      await new Promise<void>((resolve, reject) => {
        upstream.once('open', () => resolve())
        upstream.once('error', reject)
        upstream.once('unexpected-response', (_r, res) => reject(new Error(`the node answered the upgrade with HTTP ${res.statusCode}`)))
      })
    } catch (err) {
      upstream.terminate()
      options.logger.warn({ node_id: nodeId, err: (err as Error).message }, 'rpc gateway: the node refused a WebSocket')
      return refuseUpgrade(socket, 502, 'Bad Gateway', RPC_ERROR.upstreamUnavailable, "the node's RPC does not accept WebSocket connections right now")
    }
    wss.handleUpgrade(req, socket, head, (client) => {
      const conn: Connection = { nodeId: route.nodeId, upstreamUrl, client, upstream }
      let set = byNode.get(conn.nodeId)
      if (!set) byNode.set(conn.nodeId, (set = new Set()))
      set.add(conn)
      options.logger.info({ ...logged, status: 101 }, 'websocket opened')
      client.once('close', (code) => options.logger.info({ ...logged, code }, 'websocket closed'))
      let subscriptions = 0
      let keyCheckedAt = Date.now()
      const apiKey = pathKey ?? undefined
      const recheckKey = async (): Promise<boolean> => {
        keyCheckedAt = Date.now()
        const again = await identifyCaller(options.db, req.headers, apiKey, now())
        if (again.ok) return true
        client.close(CLOSE_KEY_INVALID, again.message.slice(0, 120))
        return false
      }
      const timer = setInterval(() => void recheckKey().catch(() => undefined), options.keyRecheckMs)
      const closeBoth = () => {
        clearInterval(timer)
        forget(conn)
        if (upstream.readyState === WebSocket.OPEN || upstream.readyState === WebSocket.CONNECTING) upstream.close()
        if (client.readyState === WebSocket.OPEN) client.close(CLOSE_NODE_CHANGED, 'the node closed the connection')
      }
      // Batches some of whose calls were answered here: the node gets the others as a batch of
      // their own, and its answer goes out with ours in one array, keyed by the ids sent on.
      const joins: Array<{ ids: Set<string>; answered: JsonRpcErrorResponse[] }> = []
      upstream.on('message', (data: RawData, isBinary) => {
        if (joins.length === 0) return client.send(data, { binary: isBinary })
        const join = joinFor(joins, data)
        if (join) return client.send(JSON.stringify([...join.answers, ...join.answered]))
        client.send(data, { binary: isBinary })
        // The node answered a batch with one error object (a batch it would not take, id null):
        // the refusals waiting for that batch go out on their own, the oldest first.
        if (isBatchRefusal(data)) client.send(JSON.stringify(joins.shift()!.answered))
      })
      upstream.on('close', closeBoth)
      upstream.on('error', closeBoth)
      client.on('close', closeBoth)
      client.on('error', closeBoth)
      const apiKeyId = who.caller.apiKeyId
      options.metrics?.websocketConnections.inc({ node_id: route.nodeId, api_key_id: apiKeyId })
      // Calls sent on, by id, until the node answers them: their method and when they were sent.
      const pending = new Map<string, { method: string; at: number }>()
      const tally = (outcome: WebSocketCallOutcome, calls = 1) => options.metrics?.websocketCalls.inc({ node_id: route.nodeId, api_key_id: apiKeyId, outcome }, calls)
      /** A call the node answered (with its latency), or one ended without an answer time: refused by the policy, or a notification. */
      const count = (method: string, outcome: WebSocketCallOutcome, latencyMs?: number) => {
        options.usage?.record({ nodeId: route.nodeId, apiKeyId, method, error: outcome !== 'ok', latencyMs: latencyMs ?? 0, at: now().getTime() })
        tally(outcome)
        if (latencyMs !== undefined) options.metrics?.websocketDuration.observe({ node_id: route.nodeId }, latencyMs / 1000)
      }
      upstream.on('message', (data: RawData) => {
        if (pending.size === 0) return
        let answers: unknown
        try {
          answers = JSON.parse(rawText(data))
        } catch {
          return
        }
        for (const answer of Array.isArray(answers) ? answers : [answers]) {
          if (typeof answer !== 'object' || answer === null || !('id' in answer)) continue
          const idKey = JSON.stringify((answer as { id: unknown }).id)
          const sent = pending.get(idKey)
          if (!sent) continue
          pending.delete(idKey)
          count(sent.method, 'error' in answer ? 'error' : 'ok', Date.now() - sent.at)
        }
      })
      client.once('close', () => {
        // Unanswered: an error that waited as long as the connection lasted (in rpc_usage; no answer time for the histogram).
        for (const sent of pending.values()) {
          options.usage?.record({ nodeId: route.nodeId, apiKeyId, method: sent.method, error: true, latencyMs: Date.now() - sent.at, at: now().getTime() })
          tally('error')
        }
        pending.clear()
      })
      const answerRefused = (parsed: { kind: 'single' | 'batch' }, calls: ReadonlyArray<{ id: JsonRpcId }>, code: number, message: string) => {
        const refusals = calls.map((call) => errorResponse(call.id, code, message))
        client.send(JSON.stringify(parsed.kind === 'single' ? refusals[0] : refusals))
      }
      const handle = async (data: RawData) => {
        if (Date.now() - keyCheckedAt >= options.keyRecheckMs && !(await recheckKey())) return
        const body = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)])
        const parsed = parseBody(body, options.maxBatch)
        if (parsed.kind === 'invalid') return client.send(JSON.stringify(parsed.response))
        const calls = parsed.kind === 'single' ? [parsed.call] : parsed.calls
        if (options.limiter) {
          const decision = await options.limiter.take(`key:${apiKeyId}`, calls.length)
          if (!decision.allowed) {
            // Not in rpc_usage (as over HTTP, where a 429 comes before the node is known); here the node is known.
            tally('refused', calls.length)
            return answerRefused(parsed, calls, RPC_ERROR.limitExceeded, `rate limit exceeded: too many requests for this API key; retry in ${decision.retryAfterSeconds} s`)
          }
        }
        // As over HTTP: in a batch, a call refused here (invalid, the method policy, the
        // subscription limit) gets its own error in the batch's answer and the others go on.
        const passing: JsonRpcCall[] = []
        const answered: JsonRpcErrorResponse[] = []
        for (const call of calls) {
          if (isErrorResponse(call)) {
            answered.push(call)
            continue
          }
          const reason = route.policy.check(call.method)
          if (reason) {
            count(call.method, 'refused')
            answered.push(errorResponse(call.id, RPC_ERROR.methodNotAllowed, reason))
            continue
          }
          if (call.method === 'eth_subscribe') {
            if (subscriptions >= options.maxSubscriptions) {
              tally('refused')
              answered.push(errorResponse(call.id, RPC_ERROR.limitExceeded, `at most ${options.maxSubscriptions} subscriptions per connection`))
              continue
            }
            subscriptions++
          }
          if (call.method === 'eth_unsubscribe') subscriptions = Math.max(0, subscriptions - 1)
          passing.push(call)
        }
        if (parsed.kind === 'single' && answered.length > 0) return client.send(JSON.stringify(answered[0]))
        if (passing.length === 0) return client.send(JSON.stringify(answered))
        if (upstream.readyState !== WebSocket.OPEN) return
        const at = Date.now()
        const awaited: string[] = []
        for (const call of passing) {
          // A notification (no id) gets no answer to wait for: counted as sent.
          if (call.id === null || call.id === undefined) count(call.method, 'ok')
          else {
            awaited.push(JSON.stringify(call.id))
            if (pending.size < MAX_PENDING_CALLS) pending.set(JSON.stringify(call.id), { method: call.method, at })
          }
        }
        if (answered.length === 0) return upstream.send(body)
        // Only notifications go on: nothing of the node's to wait for.
        // Nothing of the node's to wait for (only notifications go on), or too many batches wait
        // already: the refusals go out now, on their own.
        if (awaited.length === 0 || joins.length >= MAX_PENDING_CALLS) client.send(JSON.stringify(answered))
        else joins.push({ ids: new Set(awaited), answered })
        upstream.send(JSON.stringify(passing.map((call) => call.raw)))
      }
      // One frame at a time, in the order they came: eth_subscribe before its eth_unsubscribe.
      let queue = Promise.resolve()
      client.on('message', (data: RawData) => {
        queue = queue.then(() => handle(data)).catch((err: unknown) => options.logger.warn({ err }, 'rpc gateway: WebSocket frame failed'))
      })
    })
  }

  return {
    handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void {
      accept(req, socket, head).catch((err: unknown) => {
        options.logger.error({ err }, 'rpc gateway: WebSocket upgrade failed')
        if (!socket.destroyed) refuseUpgrade(socket, 500, 'Internal Server Error', RPC_ERROR.internal, 'internal error')
      })
    },
    /** After a node's route changed: its connections whose upstream is no longer right are closed. */
    async nodeChanged(nodeId: string): Promise<void> {
      const conns = byNode.get(nodeId.toLowerCase())
      if (!conns || conns.size === 0) return
      const route = await options.routes.get(nodeId)
      for (const conn of [...conns]) {
        const stillRight = route && SERVING_STATES.includes(route.state) && route.upstream?.url.replace(/^http/, 'ws') === conn.upstreamUrl
        if (!stillRight) conn.client.close(CLOSE_NODE_CHANGED, 'the node moved or stopped serving; reconnect')
      }
    },
    get connections(): number {
      let n = 0
      for (const set of byNode.values()) n += set.size
      return n
    },
    close(): void {
      for (const set of byNode.values()) for (const conn of set) conn.client.close(1001, 'the gateway is stopping')
      wss.close()
    },
  }
}

export type WebSocketProxy = ReturnType<typeof createWebSocketProxy>

/** The join a node's answer belongs to (an array with an id sent on for it), taken off the list, with the node's answers. */
function joinFor(joins: Array<{ ids: Set<string>; answered: JsonRpcErrorResponse[] }>, data: RawData): { answers: unknown[]; answered: JsonRpcErrorResponse[] } | undefined {
  let answers: unknown
  try {
    answers = JSON.parse(rawText(data))
  } catch {
    return undefined
  }
  if (!Array.isArray(answers)) return undefined
  const ids = answers.flatMap((a) => (typeof a === 'object' && a !== null && 'id' in a ? [JSON.stringify((a as { id: unknown }).id)] : []))
  const index = joins.findIndex((join) => ids.some((id) => join.ids.has(id)))
  if (index < 0) return undefined
  const [join] = joins.splice(index, 1)
  return { answers, answered: join!.answered }
}

/** A single error object with a null id: how a node refuses a whole batch. */
function isBatchRefusal(data: RawData): boolean {
  try {
    const answer = JSON.parse(rawText(data)) as unknown
    return typeof answer === 'object' && answer !== null && !Array.isArray(answer) && 'error' in answer && (answer as { id?: unknown }).id === null
  } catch {
    return false
  }
}

function rawText(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8')
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8')
  return Buffer.from(data).toString('utf8')
}
