/**
 * Fewer calls to the node (docs/rpc-gateway.md, "Merged reads and cached ids"), as eRPC does:
 *
 * - **Merged in-flight reads**: identical single calls of a read-only method (same node address,
 *   method and params) that arrive while one is on its way to the node wait for that one; every
 *   caller gets its answer with its own `id`. Writes (eth_sendRawTransaction, sendrawtransaction,
 *   ...) and anything not in READ_ONLY_METHODS are never merged.
 * - **Cached chain ids**: `eth_chainId` and `net_version` are asked once per node address and
 *   answered from memory until the node's route changes (a health event or a new address).
 */
import type { JsonRpcCall, JsonRpcId } from './json-rpc.js'
import type { UpstreamResponse } from './upstream.js'

/** Methods whose answer depends only on the chain's state at the moment: safe to share between concurrent callers. */
export const READ_ONLY_METHODS: ReadonlySet<string> = new Set([
  // Ethereum-style
  'eth_blockNumber',
  'eth_getBlockByNumber',
  'eth_getBlockByHash',
  'eth_getBlockTransactionCountByNumber',
  'eth_getBlockTransactionCountByHash',
  'eth_call',
  'eth_estimateGas',
  'eth_getBalance',
  'eth_getCode',
  'eth_getStorageAt',
  'eth_getTransactionCount',
  'eth_getTransactionByHash',
  'eth_getTransactionReceipt',
  'eth_getLogs',
  'eth_gasPrice',
  'eth_maxPriorityFeePerGas',
  'eth_feeHistory',
  'eth_syncing',
  'eth_chainId',
  'net_version',
  'web3_clientVersion',
  // Bitcoin-style
  'getblockchaininfo',
  'getblockcount',
  'getbestblockhash',
  'getblockhash',
  'getblock',
  'getblockheader',
  'getnetworkinfo',
  'getmempoolinfo',
  'getrawtransaction',
  'estimatesmartfee',
])

export const CACHED_METHODS: ReadonlySet<string> = new Set(['eth_chainId', 'net_version'])

/** Only plain calls are merged: extra members could mean something to the node. */
const PLAIN_MEMBERS = new Set(['jsonrpc', 'id', 'method', 'params'])

/** The merge key of a call, or undefined when it must go to the node on its own. */
export function mergeKey(upstreamUrl: string, call: JsonRpcCall): string | undefined {
  if (!READ_ONLY_METHODS.has(call.method)) return undefined
  for (const member of Object.keys(call.raw)) if (!PLAIN_MEMBERS.has(member)) return undefined
  return `${upstreamUrl}\n${call.method}\n${JSON.stringify(call.raw.params ?? null)}`
}

/** The node's answer to another caller's identical call, given this caller's id; unchanged when it is not a JSON-RPC object. */
export function withCallerId(answer: UpstreamResponse, id: JsonRpcId): UpstreamResponse {
  let parsed: unknown
  try {
    parsed = JSON.parse(answer.body.toString('utf8'))
  } catch {
    return answer
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return answer
  return { ...answer, body: Buffer.from(JSON.stringify({ ...parsed, id })) }
}

/** The `result` of a successful single answer, if any. */
export function resultOf(answer: UpstreamResponse): { result: unknown } | undefined {
  if (answer.status !== 200) return undefined
  try {
    const parsed = JSON.parse(answer.body.toString('utf8')) as Record<string, unknown>
    if (typeof parsed === 'object' && parsed !== null && !('error' in parsed) && 'result' in parsed) return { result: parsed.result }
  } catch {
    // not cacheable
  }
  return undefined
}

export interface InFlightReads {
  /**
   * `send` unless an identical call is already on its way; then that call's answer with `id`.
   * `onJoin` is told when this call joined another one.
   */
  run(key: string, id: JsonRpcId, send: () => Promise<UpstreamResponse>, onJoin?: () => void): Promise<UpstreamResponse>
}

export function createInFlightReads(): InFlightReads {
  const inFlight = new Map<string, Promise<UpstreamResponse>>()
  return {
    async run(key, id, send, onJoin) {
      const running = inFlight.get(key)
      if (running) {
        onJoin?.()
        return withCallerId(await running, id)
      }
      const started = send()
      inFlight.set(key, started)
      try {
        return await started
      } finally {
        inFlight.delete(key)
      }
    },
  }
}

/** `eth_chainId` / `net_version` results per node, valid while the node's address is the one they were read from. */
export class ChainIdCache {
  private readonly entries = new Map<string, { upstreamUrl: string; results: Map<string, unknown> }>()

  get(nodeId: string, upstreamUrl: string, method: string): { result: unknown } | undefined {
    const entry = this.entries.get(nodeId)
    if (!entry || entry.upstreamUrl !== upstreamUrl || !entry.results.has(method)) return undefined
    return { result: entry.results.get(method) }
  }

  set(nodeId: string, upstreamUrl: string, method: string, result: unknown): void {
    let entry = this.entries.get(nodeId)
    if (!entry || entry.upstreamUrl !== upstreamUrl) {
      entry = { upstreamUrl, results: new Map() }
      this.entries.delete(nodeId)
      // Bounded: one small entry per node this gateway serves; the oldest goes first.
      if (this.entries.size >= 100_000) this.entries.delete(this.entries.keys().next().value as string)
      this.entries.set(nodeId, entry)
    }
    entry.results.set(method, result)
  }

  /** The node's route changed: ask the node again. */
  invalidate(nodeId: string): void {
    this.entries.delete(nodeId)
  }
}
