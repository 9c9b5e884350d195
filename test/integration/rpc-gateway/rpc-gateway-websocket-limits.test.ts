/**
 * WebSocket frames against the key's rate limit and in its usage, on both databases: a real
 * gateway in front of a real anvil, the gateway's clock held still so no token comes back during
 * the test. Every call in a frame takes a token from the same bucket as the key's HTTP calls; a
 * call over the limit gets the limit error and never reaches the node; answered calls, and calls
 * the method policy refuses, are counted per method.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { createLogger } from '../../../src/log.js'
import { RPC_ERROR } from '../../../src/rpc-gateway/json-rpc.js'
import { DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { gatewaySettings, insertServingNode, rpc, rpcError, startAnvil, type RunningAnvil } from '../../helpers/rpc-gateway-fixtures.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { Resources } from '../http/harness.js'

const BURST = 5
const FROZEN = new Date('2026-11-27T12:00:00Z')

describe.each(DIALECTS)('rpc-gateway WebSocket frames, rate limit and usage on %s', (dialect) => {
  const resources = new Resources()
  let t: TestDatabase
  let anvil: RunningAnvil
  let gateway: RunningRpcGateway
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-rpc-ws-limits-'))

  beforeAll(async () => {
    t = await resources.database(dialect)
    anvil = await startAnvil(31337)
    resources.add(() => anvil.stop())
    resources.add(async () => fs.rmSync(tmp, { recursive: true, force: true }))
    gateway = await startRpcGateway(gatewaySettings(tmp, { RPC_GATEWAY_RATE_LIMIT_PER_SECOND: 1, RPC_GATEWAY_RATE_LIMIT_BURST: BURST }), {
      db: t.db,
      logger: createLogger({ level: 'silent' }),
      chains: staticChainSource(await loadChainCatalogue(defaultConfigDir())),
      usageFlushMs: 50,
      now: () => FROZEN,
    })
    resources.add(() => gateway.stop())
  }, 60_000)

  afterAll(() => resources.cleanup())

  it('takes a token per call in each frame from the key’s bucket, shared with HTTP, and counts what the node answered', async () => {
    const owner = await newUser(t.db)
    const { id: keyId, key } = await newKey(t.db, owner.id, { scopes: ['nodes:rpc'] })
    const nodeId = await insertServingNode(t.db, owner.id, 'ethereum-anvil', 'full', `local-ws-limits-${dialect}`, anvil.port)
    const ws = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/v1/${nodeId}`, { headers: { 'X-API-Key': key } })
    resources.add(async () => ws.terminate())
    const frames: unknown[] = []
    ws.on('message', (data) => frames.push(JSON.parse(String(data))))
    await new Promise<void>((resolve, reject) => ws.once('open', () => resolve()).once('error', reject))

    // Six frames at once, seven calls: five tokens.
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] }))
    ws.send(JSON.stringify([{ jsonrpc: '2.0', id: 2, method: 'eth_chainId', params: [] }, { jsonrpc: '2.0', id: 3, method: 'eth_blockNumber', params: [] }]))
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'anvil_mine', params: [] }))
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'eth_blockNumber', params: [] }))
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'eth_blockNumber', params: [] }))
    ws.send(JSON.stringify([{ jsonrpc: '2.0', id: 7, method: 'eth_blockNumber', params: [] }]))
    await waitFor(() => Promise.resolve(frames.length === 6), 'six answers', 20_000, 25)

    const byId = new Map<unknown, Record<string, unknown>>()
    for (const frame of frames) for (const answer of Array.isArray(frame) ? frame : [frame]) byId.set((answer as { id: unknown }).id, answer as Record<string, unknown>)
    for (const id of [1, 3, 5]) expect(byId.get(id)).toMatchObject({ id, result: expect.stringMatching(/^0x/) })
    expect(byId.get(2)).toMatchObject({ id: 2, result: '0x7a69' })
    expect(byId.get(4)).toMatchObject({ id: 4, error: { code: RPC_ERROR.methodNotAllowed } })
    for (const id of [6, 7]) expect(byId.get(id)).toMatchObject({ id, error: { code: RPC_ERROR.limitExceeded, message: expect.stringContaining('rate limit exceeded') } })
    // A batch refused whole is answered as a batch.
    expect(frames.find((f) => Array.isArray(f) && (f[0] as { id: unknown }).id === 7)).toBeDefined()

    // The same key over HTTP finds its bucket empty.
    const http = await rpc(`${gateway.url}/v1/${nodeId}`, 'eth_blockNumber', [], { 'X-API-Key': key })
    expect(http.status).toBe(429)
    expect(rpcError(http).code).toBe(RPC_ERROR.limitExceeded)

    // Usage: what reached the node, and the policy's refusal; nothing for the calls over the limit.
    type UsageRow = { method: string; requests: number | string; errors: number | string }
    const usage = async () =>
      Object.fromEntries(
        ((await t.db('rpc_usage').where({ node_id: nodeId, api_key_id: keyId }).orderBy('method').select('method', 'requests', 'errors')) as UsageRow[]).map((r) => [
          r.method,
          [Number(r.requests), Number(r.errors)],
        ]),
      )
    await waitFor(async () => JSON.stringify(await usage()) === JSON.stringify({ anvil_mine: [1, 1], eth_blockNumber: [3, 0], eth_chainId: [1, 0] }), 'usage written', 10_000, 25).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}: ${JSON.stringify(await usage())}`)
    })

    // On /metrics: four answered by the node, three refused by the gateway (the policy, the rate), each answer timed.
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
    const labels = `node_id="${nodeId}",api_key_id="${keyId}"`
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="ok",daemon="rpc-gateway"} 4`)
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="refused",daemon="rpc-gateway"} 3`)
    expect(metrics).not.toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="error"`)
    expect(metrics).toContain(`rpc_gateway_websocket_call_duration_seconds_count{daemon="rpc-gateway",node_id="${nodeId}"} 4`)
    expect(metrics).toContain(`rpc_gateway_websocket_connections_total{${labels},daemon="rpc-gateway"} 1`)
    // HTTP's own series saw none of it: the one HTTP call was refused before the node was looked up.
    expect(metrics).not.toContain(`rpc_gateway_calls_total{${labels}`)
    expect(metrics).not.toContain(key)
  })

  it('answers a batch with calls refused here in one array: each refused call its error, the others the node\'s answers, each counted', async () => {
    const owner = await newUser(t.db)
    const { id: keyId, key } = await newKey(t.db, owner.id, { scopes: ['nodes:rpc'] })
    const nodeId = await insertServingNode(t.db, owner.id, 'ethereum-anvil', 'full', `local-ws-batch-${dialect}`, anvil.port)
    const ws = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/v1/${nodeId}`, { headers: { 'X-API-Key': key } })
    resources.add(async () => ws.terminate())
    const frames: unknown[] = []
    ws.on('message', (data) => frames.push(JSON.parse(String(data))))
    await new Promise<void>((resolve, reject) => ws.once('open', () => resolve()).once('error', reject))

    ws.send(
      JSON.stringify([
        { jsonrpc: '2.0', id: 10, method: 'eth_chainId', params: [] },
        { jsonrpc: '2.0', id: 11, method: 'anvil_mine', params: [] },
        { jsonrpc: '2.0', id: 12, params: [] },
        { jsonrpc: '2.0', id: 13, method: 'eth_blockNumber', params: [] },
      ]),
    )
    await waitFor(() => Promise.resolve(frames.length === 1), 'the batch answered', 10_000, 25)
    // Anything more would arrive right behind: a second look finds the one array alone.
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 14, method: 'eth_chainId', params: [] }))
    await waitFor(() => Promise.resolve(frames.length === 2), 'the next answer', 10_000, 25)
    expect(frames[1]).toMatchObject({ id: 14, result: '0x7a69' })
    const batch = frames[0] as Array<{ id: unknown }>
    expect(Array.isArray(batch)).toBe(true)
    const byId = new Map(batch.map((answer) => [answer.id, answer]))
    expect([...byId.keys()].sort()).toEqual([10, 11, 12, 13])
    expect(byId.get(10)).toMatchObject({ result: '0x7a69' })
    expect(byId.get(11)).toMatchObject({ error: { code: RPC_ERROR.methodNotAllowed } })
    expect(byId.get(12)).toMatchObject({ error: { code: RPC_ERROR.invalidRequest } })
    expect(byId.get(13)).toMatchObject({ result: expect.stringMatching(/^0x/) })

    const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
    const labels = `node_id="${nodeId}",api_key_id="${keyId}"`
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="ok",daemon="rpc-gateway"} 3`)
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="refused",daemon="rpc-gateway"} 1`)
  })

  it('counts on /metrics, per key, the calls the node answers with an error apart from those it answers', async () => {
    const owner = await newUser(t.db)
    const { id: keyId, key } = await newKey(t.db, owner.id, { scopes: ['nodes:rpc'] })
    const nodeId = await insertServingNode(t.db, owner.id, 'ethereum-anvil', 'full', `local-ws-errors-${dialect}`, anvil.port)
    const ws = new WebSocket(`${gateway.url.replace(/^http/, 'ws')}/v1/${nodeId}/${key}`)
    resources.add(async () => ws.terminate())
    const frames: Array<{ id: unknown; error?: unknown }> = []
    ws.on('message', (data) => frames.push(JSON.parse(String(data)) as { id: unknown }))
    await new Promise<void>((resolve, reject) => ws.once('open', () => resolve()).once('error', reject))
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBalance', params: ['not an address', 'latest'] }))
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'eth_chainId', params: [] }))
    await waitFor(() => Promise.resolve(frames.length === 2), 'two answers', 10_000, 25)
    expect(frames.find((f) => f.id === 1)?.error).toBeDefined()

    const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
    const labels = `node_id="${nodeId}",api_key_id="${keyId}"`
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="error",daemon="rpc-gateway"} 1`)
    expect(metrics).toContain(`rpc_gateway_websocket_calls_total{${labels},outcome="ok",daemon="rpc-gateway"} 1`)
    expect(metrics).toContain(`rpc_gateway_websocket_call_duration_seconds_count{daemon="rpc-gateway",node_id="${nodeId}"} 2`)
  })
})
