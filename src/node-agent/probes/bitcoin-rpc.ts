/**
 * Probes a Bitcoin Core style node (Litecoin Core and other forks) over its JSON-RPC 1.0 HTTP
 * interface: `getblockchaininfo` (blocks, headers, initialblockdownload) and `getnetworkinfo`
 * (connections), judged by the profile's `sync_policy`.
 *
 * Authentication is the node's cookie: it writes `<datadir>/[<network>/].cookie` afresh at every
 * start, so the file is read for every request and a restarted node is reached with its new
 * cookie. Neither the cookie nor credentials in the URL ever appear in an error.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import type { BitcoinSyncPolicy } from '../../agent-gateway/protocol.js'
import type { Probe, ProbeReport } from './types.js'

export interface BitcoinRpcEndpointSpec {
  url: string
  /** Relative to the state directory; absent: the URL's own credentials (or none). */
  cookie_file?: string
  timeout_ms: number
}

export interface BitcoinProbeSpec extends BitcoinRpcEndpointSpec {
  sync_policy: BitcoinSyncPolicy
}

export interface BitcoinProbeOptions {
  /** The state directory: `cookie_file` is relative to it. */
  cwd: string
  /** Consecutive checks behind the headers without a new block before the node counts as stalled. */
  stallChecks?: number
  /** And at least this long without a new block (checks come faster while a command reports progress). */
  minStallMs?: number
  clock?: () => number
}

const DEFAULT_STALL_CHECKS = 5
const DEFAULT_MIN_STALL_MS = 30_000

/** Bitcoin Core's "still starting" error (loading the block index, verifying blocks, loading wallets). */
export const RPC_IN_WARMUP = -28

/** A failure described in our own words: no URL, no cookie, no credentials. */
export class BitcoinRpcError extends Error {
  constructor(
    message: string,
    /** The node's JSON-RPC error code, when it answered with one. */
    readonly code?: number,
  ) {
    super(message)
    this.name = 'BitcoinRpcError'
  }
}

export interface BitcoinRpcClient {
  /** One call; `wallet` addresses `/wallet/<name>`. Throws BitcoinRpcError. */
  call<T = unknown>(method: string, params?: unknown[], options?: { wallet?: string; timeoutMs?: number }): Promise<T>
  /** Several calls in one batch request; each result, in order. Throws on the first error. */
  batch(calls: { method: string; params?: unknown[] }[], options?: { timeoutMs?: number }): Promise<unknown[]>
}

export function createBitcoinRpcClient(spec: BitcoinRpcEndpointSpec, cwd: string): BitcoinRpcClient {
  const base = new URL(spec.url)
  let urlAuthorization: string | undefined
  if (base.username !== '' || base.password !== '') {
    urlAuthorization = basic(`${decodeURIComponent(base.username)}:${decodeURIComponent(base.password)}`)
    base.username = ''
    base.password = ''
  }
  const root = base.href.replace(/\/+$/, '')

  async function authorization(): Promise<string | undefined> {
    if (spec.cookie_file === undefined) return urlAuthorization
    let cookie: string
    try {
      cookie = (await fs.readFile(path.resolve(cwd, spec.cookie_file), 'utf8')).trim()
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      throw new BitcoinRpcError(code === 'ENOENT' ? `no RPC cookie at ${spec.cookie_file} (the node writes it when its RPC server starts)` : `cannot read the RPC cookie ${spec.cookie_file} (${code ?? 'error'})`)
    }
    if (!cookie.includes(':')) throw new BitcoinRpcError(`the RPC cookie ${spec.cookie_file} is not user:password`)
    return basic(cookie)
  }

  async function post(urlPath: string, body: unknown, timeoutMs: number): Promise<unknown> {
    const headers: Record<string, string> = { 'content-type': 'application/json' }
    const auth = await authorization()
    if (auth !== undefined) headers.authorization = auth
    let response: Response
    let text: string
    try {
      response = await fetch(`${root}${urlPath}`, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) })
      text = await response.text()
    } catch (err) {
      throw new BitcoinRpcError(describeFetchError(err, timeoutMs))
    }
    if (response.status === 401 || response.status === 403) throw new BitcoinRpcError(`the node refused the RPC credentials (HTTP ${response.status})`)
    // Bitcoin Core answers a failed call with HTTP 500 (or 404 for an unknown wallet) and the
    // JSON-RPC error in the body: the body says more than the status.
    try {
      return JSON.parse(text) as unknown
    } catch {
      throw new BitcoinRpcError(`the node answered HTTP ${response.status} without JSON`)
    }
  }

  const timeout = (options?: { timeoutMs?: number }) => options?.timeoutMs ?? spec.timeout_ms

  return {
    async call<T>(method: string, params: unknown[] = [], options?: { wallet?: string; timeoutMs?: number }): Promise<T> {
      const urlPath = options?.wallet === undefined ? '/' : `/wallet/${encodeURIComponent(options.wallet)}`
      return resultOf(method, await post(urlPath, { jsonrpc: '1.0', id: 0, method, params }, timeout(options))) as T
    },
    async batch(calls, options) {
      const answer = await post('/', calls.map((c, id) => ({ jsonrpc: '1.0', id, method: c.method, params: c.params ?? [] })), timeout(options))
      if (!Array.isArray(answer)) {
        // A node that refuses the whole batch answers one error object.
        resultOf('batch request', answer)
        throw new BitcoinRpcError('the node did not answer the batch request with a list')
      }
      const byId = new Map(answer.map((item: unknown) => [isObject(item) ? item.id : undefined, item]))
      return calls.map((c, id) => resultOf(c.method, byId.get(id)))
    },
  }
}

export function createBitcoinProbe(spec: BitcoinProbeSpec, options: BitcoinProbeOptions): Probe {
  const client = createBitcoinRpcClient(spec, options.cwd)
  const policy = spec.sync_policy
  const stallChecks = options.stallChecks ?? DEFAULT_STALL_CHECKS
  const minStallMs = options.minStallMs ?? DEFAULT_MIN_STALL_MS
  const clock = options.clock ?? (() => Date.now())
  let lastBlocks: number | undefined
  let checksWithoutProgress = 0
  let lastProgressAt = clock()
  let inFlight: Promise<ProbeReport> | undefined

  async function check(): Promise<ProbeReport> {
    const started = performance.now()
    let blocks: number
    let headers: number
    let ibd: boolean
    let progress: number | undefined
    let connections: number
    try {
      const [chain, network] = await client.batch([{ method: 'getblockchaininfo' }, { method: 'getnetworkinfo' }])
      if (!isObject(chain)) throw new BitcoinRpcError('getblockchaininfo did not answer an object')
      if (!isObject(network)) throw new BitcoinRpcError('getnetworkinfo did not answer an object')
      blocks = count('getblockchaininfo.blocks', chain.blocks)
      headers = count('getblockchaininfo.headers', chain.headers)
      if (typeof chain.initialblockdownload !== 'boolean') throw new BitcoinRpcError('getblockchaininfo.initialblockdownload is not a boolean')
      ibd = chain.initialblockdownload
      progress = typeof chain.verificationprogress === 'number' ? chain.verificationprogress : undefined
      connections = count('getnetworkinfo.connections', network.connections)
    } catch (err) {
      const error = err instanceof BitcoinRpcError ? (err.code === RPC_IN_WARMUP ? `the node is starting: ${err.message}` : err.message) : 'the probe failed'
      return { sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error }
    }
    const latency = Math.round((performance.now() - started) * 10) / 10

    // A failed check neither counts towards a stall nor clears it; a lower height (a restored or
    // reindexing node) is progress of a kind, not a stall.
    if (lastBlocks !== undefined && blocks === lastBlocks) checksWithoutProgress += 1
    else {
      checksWithoutProgress = 0
      lastProgressAt = clock()
    }
    lastBlocks = blocks

    const lag = Math.max(0, headers - blocks)
    const behind = lag > policy.max_header_lag
    const syncing = behind || (ibd && policy.initial_block_download === 'syncing') || connections < policy.min_connections
    // Blocks arrive when they are mined (minutes apart, or on demand on regtest): a head that stays
    // put is no stall. A node that knows of newer headers and does not move towards them is.
    const stalled = behind && checksWithoutProgress >= stallChecks && clock() - lastProgressAt >= minStallMs
    const metrics: Record<string, number> = {
      block_height: blocks,
      // The head of the best header chain the node knows: the network's head as it sees it
      // (block_lag_reference `node` derives block_lag from it).
      highest_block: headers,
      header_lag: lag,
      peer_count: connections,
      initial_block_download: ibd ? 1 : 0,
      rpc_latency_ms: latency,
      rpc_up: 1,
    }
    if (progress !== undefined) metrics.verification_progress = progress
    return { sync_status: stalled ? 'stalled' : syncing ? 'syncing' : 'synced', healthy: true, metrics }
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

/**
 * Has the node write its chain state (block index, UTXO set) to disk now. Bitcoin Core writes
 * them about hourly; a copy of a running node's data directory taken in between holds the blocks
 * but not the index that makes them part of the chain, and a node started from it is back at its
 * last write (on regtest, at block 0). `gettxoutsetinfo` flushes before it reads the UTXO set.
 */
export async function flushChainState(spec: BitcoinRpcEndpointSpec, cwd: string, timeoutMs = 120_000): Promise<void> {
  await createBitcoinRpcClient(spec, cwd).call('gettxoutsetinfo', ['none'], { timeoutMs })
}

function basic(credentials: string): string {
  return `Basic ${Buffer.from(credentials).toString('base64')}`
}

function resultOf(method: string, answer: unknown): unknown {
  if (!isObject(answer)) throw new BitcoinRpcError(`${method}: no answer`)
  if (isObject(answer.error)) {
    const code = typeof answer.error.code === 'number' ? answer.error.code : undefined
    const message = typeof answer.error.message === 'string' ? `: ${answer.error.message.slice(0, 200)}` : ''
    throw new BitcoinRpcError(`${method}: JSON-RPC error${code === undefined ? '' : ` ${code}`}${message}`, code)
  }
  if (!('result' in answer)) throw new BitcoinRpcError(`${method}: no result`)
  return answer.result
}

function count(what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new BitcoinRpcError(`${what} is not a count`)
  return value
}

/** Only our own words and error codes: a fetch error can echo the URL. */
function describeFetchError(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `no answer within ${timeoutMs} ms`
  const cause = err instanceof Error ? (err.cause as { code?: unknown } | undefined) : undefined
  if (cause?.code === 'UND_ERR_SOCKET') return 'the RPC endpoint closed the connection'
  if (cause && typeof cause.code === 'string') return `cannot reach the RPC endpoint (${cause.code})`
  return 'cannot reach the RPC endpoint'
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
