/**
 * What the rpc-gateway tests share: a real anvil started directly (no agent), nodes recorded as
 * running on a `local` host whose chain listens on a given port, and plain JSON-RPC calls.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import path from 'node:path'
import type { RpcGatewaySettings } from '../../daemons/rpc-gateway.js'
import { toJson } from '../../src/db/dialect.js'
import type { Db } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { insertSubscriptionOf } from './fixtures.js'
import { freePort, waitFor } from './ports.js'

const ANVIL = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../node_modules/anvil-1.7.1/bin/anvil')

export interface RunningAnvil {
  url: string
  port: number
  stop(): Promise<void>
}

export async function startAnvil(chainId: number): Promise<RunningAnvil> {
  const port = await freePort()
  const child: ChildProcess = spawn(ANVIL, ['--host', '127.0.0.1', '--port', String(port), '--chain-id', String(chainId), '--quiet'], { stdio: 'ignore' })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill('SIGTERM')
    await exited
  }
  const url = `http://127.0.0.1:${port}`
  try {
    await waitFor(() => rpc(url, 'eth_blockNumber').then((r) => r.status === 200, () => false), 'anvil to answer', 15_000, 50)
  } catch (err) {
    await stop()
    throw err
  }
  return { url, port, stop }
}

export interface Answer {
  status: number
  headers: Headers
  body: unknown
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) })
  const text = await response.text()
  let parsed: unknown = text
  try {
    parsed = JSON.parse(text)
  } catch {
    // asserted by the caller
  }
  return { status: response.status, headers: response.headers, body: parsed }
}

export function rpc(url: string, method: string, params: unknown[] = [], headers: Record<string, string> = {}): Promise<Answer> {
  return post(url, { jsonrpc: '2.0', id: 1, method, params }, headers)
}

export function rpcError(answer: Answer): { code: number; message: string } {
  return (answer.body as { error: { code: number; message: string } }).error
}

/** A node of `userId` running on a local host whose chain listens on `rpcPort` (its configure completed). */
export async function insertServingNode(db: Db, userId: string, chain: string, nodeType: string, hostId: string, rpcPort: number): Promise<string> {
  const subscriptionId = await insertSubscriptionOf(db, userId, { chain, nodeType, instanceType: 'local.small' })
  const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: chain, node_type: nodeType, provider: 'local' })
  await db('nodes').where({ id: node.id }).update({ state: 'healthy', host_id: hostId, host_ip: '127.0.0.1' })
  await recordConfigure(db, node.id, rpcPort)
  return node.id
}

export async function recordConfigure(db: Db, nodeId: string, rpcPort: number): Promise<void> {
  const now = new Date()
  await db('agent_commands').insert({
    id: crypto.randomUUID(),
    node_id: nodeId,
    type: 'configure',
    payload: toJson({ rpc_port: rpcPort }),
    status: 'completed',
    created_at: now,
    updated_at: now,
  })
}


/**
 * Gateway settings for tests: limits out of the way unless a test sets them, and a route TTL of an
 * hour, so every route change a test makes must reach the gateway through the events.
 */
export function gatewaySettings(dataDir: string, overrides: Partial<RpcGatewaySettings> = {}): RpcGatewaySettings {
  return {
    NODEPLANE_DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    RPC_GATEWAY_PORT: 0,
    RPC_GATEWAY_RATE_LIMIT_PER_SECOND: 1000,
    RPC_GATEWAY_RATE_LIMIT_BURST: 1000,
    RPC_GATEWAY_BODY_LIMIT_BYTES: 16 * 1024,
    RPC_GATEWAY_MAX_BATCH: 5,
    RPC_GATEWAY_ROUTE_TTL: 3_600_000,
    RPC_GATEWAY_UPSTREAM_TIMEOUT: 10_000,
    RPC_GATEWAY_MAX_SUBSCRIPTIONS: 2,
    RPC_GATEWAY_KEY_RECHECK: 100,
    ...overrides,
  }
}
