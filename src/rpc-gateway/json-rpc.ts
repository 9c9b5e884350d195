/**
 * JSON-RPC 2.0 as the gateway reads it (docs/rpc-gateway.md, "Errors"): requests are parsed only
 * as far as policy needs (the method of each call); every refusal is a JSON-RPC error object with
 * the caller's `id` where one could be read, never an HTML page.
 */

export type JsonRpcId = string | number | null

export interface JsonRpcCall {
  id: JsonRpcId
  method: string
  /** The call exactly as the client sent it (forwarded unchanged). */
  raw: Record<string, unknown>
}

export interface JsonRpcError {
  code: number
  message: string
  data?: unknown
}

export interface JsonRpcErrorResponse {
  jsonrpc: '2.0'
  id: JsonRpcId
  error: JsonRpcError
}

/** The codes the gateway answers with itself (the JSON-RPC 2.0 ones and the server range -32000..-32099). */
export const RPC_ERROR = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotAllowed: -32601,
  internal: -32603,
  unauthorized: -32001,
  forbidden: -32002,
  nodeNotFound: -32004,
  /** EIP-1474's "limit exceeded". */
  limitExceeded: -32005,
  nodeNotServing: -32010,
  upstreamUnavailable: -32011,
} as const

export function errorResponse(id: JsonRpcId, code: number, message: string): JsonRpcErrorResponse {
  return { jsonrpc: '2.0', id, error: { code, message } }
}

export type ParsedBody =
  | { kind: 'single'; call: JsonRpcCall }
  | { kind: 'batch'; calls: Array<JsonRpcCall | JsonRpcErrorResponse> }
  | { kind: 'invalid'; status: number; response: JsonRpcErrorResponse }

function idOf(value: unknown): JsonRpcId {
  return typeof value === 'string' || typeof value === 'number' ? value : null
}

/** One call object, or the error answering it (JSON-RPC 2.0 section 5: an invalid call's id is its id if readable, else null). */
function readCall(value: unknown): JsonRpcCall | JsonRpcErrorResponse {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return errorResponse(null, RPC_ERROR.invalidRequest, 'invalid request: each call must be a JSON object')
  }
  const raw = value as Record<string, unknown>
  const id = idOf(raw.id)
  if (typeof raw.method !== 'string' || raw.method.length === 0 || raw.method.length > 200) {
    return errorResponse(id, RPC_ERROR.invalidRequest, 'invalid request: "method" must be a non-empty string')
  }
  return { id, method: raw.method, raw }
}

export function isErrorResponse(value: JsonRpcCall | JsonRpcErrorResponse): value is JsonRpcErrorResponse {
  return 'error' in value
}

/** Parses a request body; `maxBatch` bounds a batch's length (400 beyond it). */
export function parseBody(body: Buffer, maxBatch: number): ParsedBody {
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    return { kind: 'invalid', status: 400, response: errorResponse(null, RPC_ERROR.parseError, 'parse error: the body is not valid JSON') }
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return { kind: 'invalid', status: 400, response: errorResponse(null, RPC_ERROR.invalidRequest, 'invalid request: an empty batch') }
    if (value.length > maxBatch) {
      return {
        kind: 'invalid',
        status: 400,
        response: errorResponse(null, RPC_ERROR.invalidRequest, `batch too long: ${value.length} calls, at most ${maxBatch} per request`),
      }
    }
    return { kind: 'batch', calls: value.map(readCall) }
  }
  const call = readCall(value)
  if (isErrorResponse(call)) return { kind: 'invalid', status: 400, response: call }
  return { kind: 'single', call }
}
