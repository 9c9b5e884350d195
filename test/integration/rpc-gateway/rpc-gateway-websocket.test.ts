/**
 * The rpc-gateway's WebSocket pass-through against a real anvil, on both databases: ethers'
 * WebSocketProvider receives new blocks through `eth_subscribe`, the policy and the subscription
 * limit hold per frame, an upgrade without a valid key is refused, and connections close when
 * the key is revoked (4401) or the node moves (1012, through the health event).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { WebSocketProvider } from 'ethers'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import WebSocket from 'ws'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import { createApiKey } from '../../../src/auth/api-keys.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { OutboxRelay } from '../../../src/events/relay.js'
import { createLogger } from '../../../src/log.js'
import { forceNodeState } from '../../../src/nodes/health-state-machine.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertUser } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { gatewaySettings, insertServingNode, recordConfigure, rpc, startAnvil, type RunningAnvil } from '../../helpers/rpc-gateway-fixtures.js'

let anvil: RunningAnvil
let movedTo: RunningAnvil
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-rpc-ws-'))

beforeAll(async () => {
  ;[anvil, movedTo] = await Promise.all([startAnvil(31337), startAnvil(31338)])
}, 60_000)

afterAll(async () => {
  await Promise.all([anvil?.stop(), movedTo?.stop()])
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** An open WebSocket and everything it received, closed at the end of the test. */
async function open(url: string): Promise<{ ws: WebSocket; frames: Array<Record<string, unknown>>; closed: Promise<number> }> {
  const ws = new WebSocket(url)
  const frames: Array<Record<string, unknown>> = []
  ws.on('message', (data) => frames.push(JSON.parse(String(data)) as Record<string, unknown>))
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)))
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('error', reject)
  })
  return { ws, frames, closed }
}

function upgradeStatus(url: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0)
      ws.terminate()
    })
    ws.once('open', () => {
      ws.close()
      resolve(101)
    })
    ws.once('error', (err) => (err.message.includes('Unexpected server response') ? undefined : reject(err)))
  })
}

describe.each(DIALECTS)('rpc-gateway WebSocket on %s', (dialect) => {
  let t: TestDatabase
  let gateway: RunningRpcGateway
  let relay: OutboxRelay
  const bus = createLocalBus()
  let userId: string
  let key: string
  let nodeId: string
  let wsEndpoint: string
  const sockets: WebSocket[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    relay = new OutboxRelay({ db: t.db, bus, logger: createLogger({ level: 'silent' }), pollIntervalMs: 50 })
    relay.start()
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    gateway = await startRpcGateway(
      gatewaySettings(tmp),
      { db: t.db, logger: createLogger({ level: 'silent' }), chains, events: { bus } },
    )
    userId = await insertUser(t.db)
    key = (await createApiKey(t.db, { userId, name: 'ws', scopes: ['nodes:rpc'] })).key
    nodeId = await insertServingNode(t.db, userId, 'ethereum-anvil', 'full', `local-ws-${dialect}`, anvil.port)
    wsEndpoint = `${gateway.url.replace(/^http/, 'ws')}/v1/${nodeId}`
  }, 30_000)

  afterAll(async () => {
    for (const ws of sockets) ws.terminate()
    await gateway?.stop()
    await relay?.stop()
    await bus.close()
    await t?.destroy()
  })

  it('passes eth_subscribe newHeads through to ethers WebSocketProvider', async () => {
    const provider = new WebSocketProvider(`${wsEndpoint}/${key}`, 31337, { staticNetwork: true })
    try {
      const block = new Promise<number>((resolve) => void provider.on('block', (n: number) => resolve(n)))
      // Blocks mined on the node itself, outside the gateway, arrive as subscription notifications.
      await waitFor(async () => {
        await rpc(anvil.url, 'evm_mine')
        return Promise.race([block, new Promise<undefined>((r) => setTimeout(() => r(undefined), 200))])
      }, 'a newHeads notification', 10_000, 10)
      expect(await block).toBeGreaterThan(0)
      expect(Number(await provider.send('eth_chainId', []))).toBe(31337)
    } finally {
      await provider.destroy()
    }
  })

  it('refuses denied methods and subscriptions beyond the limit per frame; an upgrade needs a valid key for this node', async () => {
    const { ws, frames } = await open(`${wsEndpoint}/${key}`)
    sockets.push(ws)
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'anvil_mine', params: [] }))
    for (const id of [2, 3, 4]) ws.send(JSON.stringify({ jsonrpc: '2.0', id, method: 'eth_subscribe', params: ['newHeads'] }))
    await waitFor(async () => frames.length >= 4, 'four answers', 5_000, 20)
    const byId = (id: number) => frames.find((f) => f.id === id) as { result?: string; error?: { code: number; message: string } }
    expect(byId(1).error?.code).toBe(-32601)
    expect(byId(2).result).toMatch(/^0x/)
    expect(byId(3).result).toMatch(/^0x/)
    expect(byId(4).error).toMatchObject({ code: -32005, message: 'at most 2 subscriptions per connection' })
    ws.close()

    expect(await upgradeStatus(wsEndpoint)).toBe(401)
    expect(await upgradeStatus(wsEndpoint, { 'X-API-Key': key })).toBe(101)
    const readOnly = (await createApiKey(t.db, { userId, name: 'read', scopes: ['nodes:read'] })).key
    expect(await upgradeStatus(`${wsEndpoint}/${readOnly}`)).toBe(403)
    const stranger = (await createApiKey(t.db, { userId: await insertUser(t.db), name: 'x', scopes: ['nodes:rpc'] })).key
    expect(await upgradeStatus(`${wsEndpoint}/${stranger}`)).toBe(404)
    expect(await upgradeStatus(`${gateway.url.replace(/^http/, 'ws')}/v1/${crypto.randomUUID()}/${key}`)).toBe(404)
  })

  it('closes a connection whose key is revoked (4401) and those of a node that moved (1012); the new connection reaches the new host', async () => {
    const revocable = await createApiKey(t.db, { userId, name: 'revocable', scopes: ['nodes:rpc'] })
    const doomed = await open(`${wsEndpoint}/${revocable.key}`)
    sockets.push(doomed.ws)
    await t.db('api_keys').where({ id: revocable.apiKey.id }).update({ revoked_at: new Date() })
    expect(await doomed.closed).toBe(4401)

    const before = await open(`${wsEndpoint}/${key}`)
    sockets.push(before.ws)
    await t.db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'maintenance', reason: 'migration: test', now: new Date() }))
    expect(await before.closed).toBe(1012)
    await t.db('nodes').where({ id: nodeId }).update({ host_id: `local-ws-${dialect}-2` })
    await recordConfigure(t.db, nodeId, movedTo.port)
    await t.db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'syncing', reason: 'migrated to a new host', now: new Date() }))
    const after = await waitFor(async () => ((await upgradeStatus(`${wsEndpoint}/${key}`)) === 101 ? open(`${wsEndpoint}/${key}`) : undefined), 'the node to serve again', 10_000, 25)
    sockets.push(after.ws)
    after.ws.send(JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'eth_chainId', params: [] }))
    await waitFor(async () => after.frames.length > 0, 'an answer', 5_000, 20)
    expect(after.frames[0]).toMatchObject({ id: 9, result: '0x7a6a' })
  })
})
