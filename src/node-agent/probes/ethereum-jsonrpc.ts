/**
 * Probes an Ethereum-style JSON-RPC endpoint: sync state, block height and peers. The block
 * height is compared between checks to notice a chain that stopped producing blocks.
 */
import { performance } from 'node:perf_hooks'
import type { Probe, ProbeReport } from './types.js'

export interface EthereumProbeSpec {
  url: string
  timeout_ms: number
}

export interface EthereumProbeOptions {
  /** Consecutive checks without a new block before the chain counts as stalled. */
  stallChecks?: number
  /**
   * And at least this long without a new block: checks come faster than blocks while the agent
   * reports progress of a command (an upgrade, a restart), and five quick checks within one
   * block time are no stall.
   */
  minStallMs?: number
  /** Milliseconds clock (tests move it). */
  clock?: () => number
}

/** The count the spec uses for an agent's no-progress stall, applied to block production. */
export const DEFAULT_STALL_CHECKS = 5
/** Five heartbeats at 15 s are 75 s: the minimum only matters for faster checks. */
export const DEFAULT_MIN_STALL_MS = 30_000

const METHODS = ['eth_syncing', 'eth_blockNumber', 'net_peerCount'] as const
type Method = (typeof METHODS)[number]
/**
 * Methods a client may not implement: a dev chain without a peer-to-peer layer (anvil) answers
 * net_peerCount with "method not found", and is then reported without `peer_count`.
 */
const OPTIONAL: ReadonlySet<string> = new Set<Method>(['net_peerCount'])
const METHOD_NOT_FOUND = -32601

class ProbeFailure extends Error {}

export function createEthereumProbe(spec: EthereumProbeSpec, options: EthereumProbeOptions = {}): Probe {
  const stallChecks = options.stallChecks ?? DEFAULT_STALL_CHECKS
  const minStallMs = options.minStallMs ?? DEFAULT_MIN_STALL_MS
  const clock = options.clock ?? (() => Date.now())
  let lastProgressAt = clock()
  const endpoint = endpointOf(spec.url)
  let lastHeight: number | undefined
  let checksWithoutProgress = 0
  // Unknown until the endpoint has answered a batch once; some servers refuse batches.
  let batching: boolean | undefined
  let inFlight: Promise<ProbeReport> | undefined

  async function call(signal: AbortSignal): Promise<Record<Method, unknown>> {
    const probing = batching === undefined
    if (batching !== false) {
      const answer = await post(endpoint, METHODS.map((method, id) => ({ jsonrpc: '2.0', id, method, params: [] })), signal, batching === undefined)
      if (Array.isArray(answer)) {
        batching = true
        const byId = new Map(answer.map((item: unknown) => [isObject(item) ? item.id : undefined, item]))
        return Object.fromEntries(METHODS.map((method, id) => [method, resultOf(method, byId.get(id))])) as Record<Method, unknown>
      }
      if (batching === true) {
        resultOf('batch request', answer)
        throw new ProbeFailure('the endpoint stopped answering batch requests')
      }
    }
    const results = await Promise.all(METHODS.map(async (method) => resultOf(method, await post(endpoint, { jsonrpc: '2.0', id: 1, method, params: [] }, signal, false))))
    // Only now: a refused batch followed by refused single calls says nothing about batching.
    if (probing) batching = false
    return Object.fromEntries(METHODS.map((method, i) => [method, results[i]])) as Record<Method, unknown>
  }

  async function check(): Promise<ProbeReport> {
    const started = performance.now()
    let answers: Record<Method, unknown>
    let height: number
    let peers: number | undefined
    try {
      answers = await call(AbortSignal.timeout(spec.timeout_ms))
      height = quantity('eth_blockNumber', answers.eth_blockNumber)
      peers = answers.net_peerCount === METHOD_ABSENT ? undefined : quantity('net_peerCount', answers.net_peerCount)
      if (answers.eth_syncing !== false && !isObject(answers.eth_syncing)) throw new ProbeFailure('eth_syncing returned neither false nor a sync object')
    } catch (err) {
      return { sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error: describe(err, spec.timeout_ms) }
    }
    const latency = Math.round((performance.now() - started) * 10) / 10

    // A failed check neither counts towards a stall nor clears it: there was nothing to compare.
    // A head lower than before is a restarted (or upgraded, or restored) chain starting over,
    // not a stall: only a head that stays where it was counts.
    if (lastHeight !== undefined && height === lastHeight) checksWithoutProgress += 1
    else {
      checksWithoutProgress = 0
      lastProgressAt = clock()
    }
    lastHeight = height

    const metrics: Record<string, number> = { block_height: height, ...(peers === undefined ? {} : { peer_count: peers }), rpc_latency_ms: latency, rpc_up: 1 }
    const syncing = answers.eth_syncing
    if (isObject(syncing)) {
      try {
        metrics.highest_block = quantity('eth_syncing.highestBlock', syncing.highestBlock)
      } catch {
        // Some clients omit highestBlock while they look for peers; the status is still syncing.
      }
    }
    const stalled = checksWithoutProgress >= stallChecks && clock() - lastProgressAt >= minStallMs
    return { sync_status: stalled ? 'stalled' : isObject(syncing) ? 'syncing' : 'synced', healthy: true, metrics }
  }

  return {
    check() {
      // Overlapping calls share one check, so each check compares heights exactly once.
      inFlight ??= check().finally(() => {
        inFlight = undefined
      })
      return inFlight
    },
  }
}

interface Endpoint {
  url: string
  headers: Record<string, string>
}

/** fetch refuses URLs with credentials, so `user:password@` becomes a Basic authorization header. */
function endpointOf(raw: string): Endpoint {
  const url = new URL(raw)
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (url.username !== '' || url.password !== '') {
    const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`
    headers.authorization = `Basic ${Buffer.from(credentials).toString('base64')}`
    url.username = ''
    url.password = ''
  }
  return { url: url.href, headers }
}

async function post(endpoint: Endpoint, body: unknown, signal: AbortSignal, tolerateRefusal: boolean): Promise<unknown> {
  const response = await fetch(endpoint.url, { method: 'POST', headers: endpoint.headers, body: JSON.stringify(body), signal })
  const text = await response.text()
  if (!response.ok && !tolerateRefusal) throw new ProbeFailure(`the endpoint answered HTTP ${response.status}`)
  try {
    return JSON.parse(text) as unknown
  } catch {
    if (tolerateRefusal) return undefined
    throw new ProbeFailure('the endpoint did not answer JSON')
  }
}

/** An optional method the client does not have (anvil answers net_peerCount with method not found). */
const METHOD_ABSENT = Symbol('method absent')

function resultOf(method: string, answer: unknown): unknown {
  if (!isObject(answer)) throw new ProbeFailure(`${method}: no answer`)
  if (isObject(answer.error) && answer.error.code === METHOD_NOT_FOUND && OPTIONAL.has(method)) return METHOD_ABSENT
  if (isObject(answer.error)) {
    const code = typeof answer.error.code === 'number' ? ` ${answer.error.code}` : ''
    const message = typeof answer.error.message === 'string' ? `: ${answer.error.message.slice(0, 200)}` : ''
    throw new ProbeFailure(`${method}: JSON-RPC error${code}${message}`)
  }
  if (!('result' in answer)) throw new ProbeFailure(`${method}: no result`)
  return answer.result
}

function quantity(what: string, value: unknown): number {
  if (typeof value !== 'string' || !/^0x[0-9a-fA-F]{1,16}$/.test(value)) throw new ProbeFailure(`${what} is not a hex quantity`)
  return Number.parseInt(value, 16)
}

/** Only our own messages and error codes: a fetch error can echo the URL, which may hold an API key. */
function describe(err: unknown, timeoutMs: number): string {
  if (err instanceof ProbeFailure) return err.message
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `no answer within ${timeoutMs} ms`
  const cause = err instanceof Error ? (err.cause as { code?: unknown } | undefined) : undefined
  if (cause?.code === 'UND_ERR_SOCKET') return 'the JSON-RPC endpoint closed the connection'
  if (cause && typeof cause.code === 'string') return `cannot reach the JSON-RPC endpoint (${cause.code})`
  return 'cannot reach the JSON-RPC endpoint'
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
