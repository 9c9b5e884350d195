/**
 * The rpc-gateway's durable usage, merged identical reads and cached chain ids, on both databases:
 * a gateway in-process in front of a small local JSON-RPC upstream that counts the calls it gets
 * (and can hold them), the api-server's GET /api/v1/nodes/{id}/usage, two gateways adding to
 * the same rows, and the retention prune.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ADMIN_SCOPE } from '../../../src/auth/scopes.js'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { createLogger } from '../../../src/log.js'
import { pruneUsage, USAGE_BUCKET_MS, USAGE_RETENTION_MS, type NodeUsage } from '../../../src/rpc-gateway/usage.js'
import { DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { gatewaySettings, insertServingNode, post, recordConfigure, rpc } from '../../helpers/rpc-gateway-fixtures.js'
import { newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'
import { Resources } from '../http/harness.js'

/** A JSON-RPC node stand-in: counts each call by method, can hold a method's answers until released. */
interface FakeNode {
  port: number
  calls: Map<string, number>
  hold(method: string): () => void
  close(): Promise<void>
}

async function startFakeNode(chainId: string): Promise<FakeNode> {
  const calls = new Map<string, number>()
  const held = new Map<string, Promise<void>>()
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: unknown; method: string; params?: unknown[] } | Array<{ id: unknown; method: string; params?: unknown[] }>
      const answer = (call: { id: unknown; method: string; params?: unknown[] }) => {
        calls.set(call.method, (calls.get(call.method) ?? 0) + 1)
        if (call.method === 'eth_chainId') return { jsonrpc: '2.0', id: call.id, result: chainId }
        if (call.method === 'net_version') return { jsonrpc: '2.0', id: call.id, result: String(Number(chainId)) }
        if (call.method === 'fail_method') return { jsonrpc: '2.0', id: call.id, error: { code: -32000, message: 'execution reverted' } }
        return { jsonrpc: '2.0', id: call.id, result: { method: call.method, params: call.params ?? [] } }
      }
      const answers = Array.isArray(body) ? body.map(answer) : answer(body)
      const gate = Array.isArray(body) ? undefined : held.get(body.method)
      void (gate ?? Promise.resolve()).then(() => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(answers))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as AddressInfo).port,
    calls,
    hold(method) {
      let release!: () => void
      held.set(method, new Promise<void>((resolve) => (release = resolve)))
      return () => {
        held.delete(method)
        release()
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

async function metricValue(gateway: RunningRpcGateway, name: string, nodeId: string): Promise<number> {
  const text = await (await fetch(`${gateway.url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`node_id="${nodeId}"`))
  return line ? Number(line.split(' ').pop()) : 0
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-rpc-usage-'))

afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }))

describe.each(DIALECTS)('rpc-gateway usage, merged reads and cached ids on %s', (dialect) => {
  const resources = new Resources()
  let t: TestDatabase
  let api: AuthApi
  let gateway: RunningRpcGateway
  let second: RunningRpcGateway
  let node: FakeNode
  let movedTo: FakeNode
  let ownerId: string
  let rpcKey: { id: string; key: string }
  let otherRpcKey: { id: string; key: string }
  let readKey: string
  let strangerReadKey: string
  let adminKey: string
  const endpoint = (g: RunningRpcGateway, nodeId: string) => `${g.url}/v1/${nodeId}`

  beforeAll(async () => {
    t = await resources.database(dialect)
    ;[node, movedTo] = await Promise.all([startFakeNode('0x7a69'), startFakeNode('0x7a6a')])
    resources.add(() => node.close())
    resources.add(() => movedTo.close())
    api = await startAuthApi(resources, t.db)
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    const logger = createLogger({ level: 'silent' })
    // The held read must outlive the wait for the 99 others to join it, also on a loaded machine.
    gateway = await startRpcGateway(gatewaySettings(tmp, { RPC_GATEWAY_MAX_BATCH: 10, RPC_GATEWAY_KEY_RECHECK: 10_000, RPC_GATEWAY_UPSTREAM_TIMEOUT: 120_000 }), {
      db: t.db,
      logger,
      chains,
      usageFlushMs: 50,
    })
    resources.add(() => gateway.stop())
    second = await startRpcGateway(gatewaySettings(tmp, { RPC_GATEWAY_MAX_BATCH: 10, RPC_GATEWAY_KEY_RECHECK: 10_000 }), { db: t.db, logger, chains, usageFlushMs: 50 })
    resources.add(() => second.stop())
    const owner = await newUser(t.db)
    const stranger = await newUser(t.db)
    const admin = await newUser(t.db, { admin: true })
    ownerId = owner.id
    rpcKey = await newKey(t.db, owner.id, { scopes: ['nodes:rpc'] })
    otherRpcKey = await newKey(t.db, owner.id, { scopes: ['nodes:rpc'] })
    readKey = (await newKey(t.db, owner.id, { scopes: ['nodes:read'] })).key
    strangerReadKey = (await newKey(t.db, stranger.id, { scopes: ['nodes:read'] })).key
    adminKey = (await newKey(t.db, admin.id, { scopes: ['*', ADMIN_SCOPE], admin: true })).key
  }, 60_000)

  afterAll(() => resources.cleanup())

  it('merges 100 concurrent identical reads into one call to the node; each caller gets its own id', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-merge', node.port)
    // One call first: the route is read, the key's last use written and a lease of tokens taken, so
    // the 100 below meet nothing but the merge.
    expect((await post(endpoint(gateway, nodeId), { jsonrpc: '2.0', id: 0, method: 'eth_blockNumber', params: [] }, { 'X-API-Key': rpcKey.key })).status).toBe(200)
    const release = node.hold('eth_getBalance')
    const params = ['0x0000000000000000000000000000000000000001', 'latest']
    const ids = Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? i : `caller-${i}`))
    const answers = Promise.all(ids.map((id) => post(endpoint(gateway, nodeId), { jsonrpc: '2.0', id, method: 'eth_getBalance', params }, { 'X-API-Key': rpcKey.key })))
    try {
      // Every one of the other 99 has joined the first, held at the node.
      await waitFor(async () => (await metricValue(gateway, 'rpc_gateway_merged_calls_total', nodeId)) === 99, '99 calls merged', 50_000, 25)
    } catch (err) {
      // Say what the calls got and how many reached the node: a timeout here is otherwise undiagnosable.
      release()
      const statuses = (await answers).map((a) => a.status)
      const merged = await metricValue(gateway, 'rpc_gateway_merged_calls_total', nodeId)
      throw new Error(`${(err as Error).message}: merged ${merged}, at the node ${node.calls.get('eth_getBalance') ?? 0}, statuses ${JSON.stringify(statuses)}`)
    } finally {
      release()
    }
    const results = await answers
    expect(node.calls.get('eth_getBalance')).toBe(1)
    results.forEach((answer, i) => {
      expect(answer.status).toBe(200)
      expect(answer.body).toEqual({ jsonrpc: '2.0', id: ids[i], result: { method: 'eth_getBalance', params } })
    })

    // A read with other params, or the same read after the first answered, goes to the node again.
    await rpc(endpoint(gateway, nodeId), 'eth_getBalance', ['0x0000000000000000000000000000000000000002', 'latest'], { 'X-API-Key': rpcKey.key })
    await rpc(endpoint(gateway, nodeId), 'eth_getBalance', params, { 'X-API-Key': rpcKey.key })
    expect(node.calls.get('eth_getBalance')).toBe(3)
  }, 90_000)

  it('never merges writes: identical concurrent eth_sendRawTransaction calls each reach the node', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-writes', node.port)
    const release = node.hold('eth_sendRawTransaction')
    const answers = Promise.all(
      [1, 2, 3, 4, 5].map((id) => post(endpoint(gateway, nodeId), { jsonrpc: '2.0', id, method: 'eth_sendRawTransaction', params: ['0x02f8'] }, { 'X-API-Key': rpcKey.key })),
    )
    try {
      await waitFor(() => Promise.resolve(node.calls.get('eth_sendRawTransaction') === 5), 'five writes at the node', 20_000, 25)
    } finally {
      release()
    }
    expect((await answers).map((a) => (a.body as { id: number }).id)).toEqual([1, 2, 3, 4, 5])
    expect(await metricValue(gateway, 'rpc_gateway_merged_calls_total', nodeId)).toBe(0)
  })

  it('asks the node for eth_chainId and net_version once, until its route changes', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-chain-id', node.port)
    const before = { chainId: node.calls.get('eth_chainId') ?? 0, netVersion: node.calls.get('net_version') ?? 0 }
    for (const id of [1, 'two', 3]) {
      const answer = await post(endpoint(gateway, nodeId), { jsonrpc: '2.0', id, method: 'eth_chainId', params: [] }, { 'X-API-Key': rpcKey.key })
      expect(answer.body).toEqual({ jsonrpc: '2.0', id, result: '0x7a69' })
      expect((await post(endpoint(gateway, nodeId), { jsonrpc: '2.0', id, method: 'net_version', params: [] }, { 'X-API-Key': rpcKey.key })).body).toEqual({ jsonrpc: '2.0', id, result: '31337' })
    }
    expect(node.calls.get('eth_chainId')).toBe(before.chainId + 1)
    expect(node.calls.get('net_version')).toBe(before.netVersion + 1)
    expect(await metricValue(gateway, 'rpc_gateway_cached_calls_total', nodeId)).toBe(4)

    // The node moves (its chain now configured on another address): the id is asked again there.
    await recordConfigure(t.db, nodeId, movedTo.port)
    gateway.routes.invalidate(nodeId)
    expect((await rpc(endpoint(gateway, nodeId), 'eth_chainId', [], { 'X-API-Key': rpcKey.key })).body).toMatchObject({ id: 1, result: '0x7a6a' })
    expect((await rpc(endpoint(gateway, nodeId), 'eth_chainId', [], { 'X-API-Key': rpcKey.key })).body).toMatchObject({ id: 1, result: '0x7a6a' })
    expect(movedTo.calls.get('eth_chainId')).toBe(1)
  })

  it('records calls per node, key and method with errors and latency, written by every gateway into the same rows, and serves them on GET /nodes/{id}/usage', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-counted', node.port)
    const headers = { 'X-API-Key': rpcKey.key }
    for (let i = 0; i < 3; i++) expect((await rpc(endpoint(gateway, nodeId), 'eth_blockNumber', [], headers)).status).toBe(200)
    // Through the second gateway, with another key: added to the same hour's rows.
    expect((await rpc(endpoint(second, nodeId), 'eth_blockNumber', [], { 'X-API-Key': otherRpcKey.key })).status).toBe(200)
    // A batch: one answer, one error from the node.
    const batch = await post(endpoint(gateway, nodeId), [{ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }, { jsonrpc: '2.0', id: 2, method: 'fail_method', params: [] }], headers)
    expect((batch.body as unknown[]).length).toBe(2)
    // Refused by the method policy: an error, never at the node.
    expect((await rpc(endpoint(gateway, nodeId), 'anvil_setBalance', [], headers)).body).toMatchObject({ error: { code: -32601 } })
    // Not the caller's node (unknown id): not counted anywhere.
    expect((await rpc(endpoint(gateway, crypto.randomUUID()), 'eth_blockNumber', [], headers)).status).toBe(404)

    let usage: NodeUsage | undefined
    await waitFor(
      async () => {
        const answer = await api.call('GET', `/api/v1/nodes/${nodeId}/usage`, { apiKey: readKey })
        usage = answer.body as NodeUsage
        return answer.status === 200 && usage.totals.requests === 7
      },
      'the usage of 7 calls',
      20_000,
      25,
    )
    if (!usage) throw new Error('no usage')
    expect(usage).toMatchObject({ node_id: nodeId, window: '24h', totals: { requests: 7, errors: 2 } })
    expect(usage.totals.p50_ms).toBeGreaterThan(0)
    expect(usage.totals.p99_ms).toBeGreaterThanOrEqual(usage.totals.p50_ms ?? Infinity)
    expect(usage.methods.map((m) => [m.method, m.requests, m.errors])).toEqual([
      ['eth_blockNumber', 5, 0],
      ['anvil_setBalance', 1, 1],
      ['fail_method', 1, 1],
    ])
    expect(usage.api_keys).toEqual([
      { api_key_id: rpcKey.id, requests: 6, errors: 2 },
      { api_key_id: otherRpcKey.id, requests: 1, errors: 0 },
    ])
    // One row per hour, node, key and method: the two gateways' counts were summed, not duplicated.
    const rows = (await t.db('rpc_usage').where({ node_id: nodeId })) as Array<{ bucket_start_ms: number | string; method: string; api_key_id: string }>
    expect(rows).toHaveLength(4)
    for (const row of rows) expect(Number(row.bucket_start_ms) % USAGE_BUCKET_MS).toBe(0)

    // The admin sees it too; 7d covers the same calls.
    const byAdmin = await api.call('GET', `/api/v1/nodes/${nodeId}/usage?window=7d`, { apiKey: adminKey })
    expect(byAdmin.status).toBe(200)
    expect(byAdmin.body).toMatchObject({ window: '7d', totals: { requests: 7, errors: 2 } })
  })

  it('refuses a bad window, hides other users\' nodes, and needs nodes:read', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-auth', node.port)
    const bad = await api.call('GET', `/api/v1/nodes/${nodeId}/usage?window=30d`, { apiKey: readKey })
    expect(bad.status).toBe(400)
    expect(bad.body).toMatchObject({ error: expect.any(String), details: expect.anything() })
    expect(JSON.stringify(bad.body)).toContain('24h')

    const stranger = await api.call('GET', `/api/v1/nodes/${nodeId}/usage`, { apiKey: strangerReadKey })
    const unknown = await api.call('GET', `/api/v1/nodes/${crypto.randomUUID()}/usage`, { apiKey: strangerReadKey })
    const malformed = await api.call('GET', '/api/v1/nodes/not-a-node/usage', { apiKey: readKey })
    expect([stranger.status, unknown.status, malformed.status]).toEqual([404, 404, 404])
    expect(stranger.body).toEqual(unknown.body)

    expect((await api.call('GET', `/api/v1/nodes/${nodeId}/usage`)).status).toBe(401)
    expect((await api.call('GET', `/api/v1/nodes/${nodeId}/usage`, { apiKey: rpcKey.key })).status).toBe(403)

    const empty = await api.call('GET', `/api/v1/nodes/${nodeId}/usage`, { apiKey: readKey })
    expect(empty.body).toMatchObject({ totals: { requests: 0, errors: 0, p50_ms: null, p99_ms: null }, methods: [], api_keys: [] })
  })

  it('drops buckets older than 8 days; the 7d window counts only its own hours', async () => {
    const nodeId = await insertServingNode(t.db, ownerId, 'ethereum-anvil', 'full', 'local-usage-retention', node.port)
    const hour = Math.floor(Date.now() / USAGE_BUCKET_MS) * USAGE_BUCKET_MS
    const row = (hoursAgo: number, requests: number) => ({ bucket_start_ms: hour - hoursAgo * USAGE_BUCKET_MS, node_id: nodeId, api_key_id: rpcKey.id, method: 'eth_call', requests, errors: 0, latency_ms_sum: requests, latency_le_1: requests })
    await t.db('rpc_usage').insert([row(0, 1), row(30, 10), row(7 * 24 + 2, 100), row(9 * 24, 1000)])

    const day = (await api.call('GET', `/api/v1/nodes/${nodeId}/usage`, { apiKey: readKey })).body as NodeUsage
    const week = (await api.call('GET', `/api/v1/nodes/${nodeId}/usage?window=7d`, { apiKey: readKey })).body as NodeUsage
    expect([day.totals.requests, week.totals.requests]).toEqual([1, 11])
    expect(week.totals).toMatchObject({ p50_ms: 1, p99_ms: 1, mean_ms: 1 })

    await pruneUsage(t.db, Date.now() - USAGE_RETENTION_MS)
    const left = (await t.db('rpc_usage').where({ node_id: nodeId }).orderBy('requests')) as Array<{ requests: number | string }>
    expect(left.map((r) => Number(r.requests))).toEqual([1, 10, 100])
  })
})
