/**
 * The rpc-gateway in-process against real chains (anvil, litecoind -regtest) on both databases:
 * ethers v6 through a node's endpoint, plain JSON-RPC to litecoind, the method policy, the auth
 * matrix, the limits, and a node that moves (driven through the health state machine, the outbox,
 * the relay and the bus the gateway listens on).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { FetchRequest, JsonRpcProvider, Wallet, parseEther } from 'ethers'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import { createApiKey } from '../../../src/auth/api-keys.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { OutboxRelay } from '../../../src/events/relay.js'
import { createLogger } from '../../../src/log.js'
import { forceNodeState } from '../../../src/nodes/health-state-machine.js'
import { DEV_ACCOUNT_KEY } from '../../helpers/anvil.js'
import { gatewaySettings, insertServingNode, post, recordConfigure, rpc, rpcError, startAnvil, type RunningAnvil } from '../../helpers/rpc-gateway-fixtures.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertUser } from '../../helpers/fixtures.js'
import { startLitecoind, type RunningLitecoind } from '../../helpers/litecoind.js'
import { waitFor } from '../../helpers/ports.js'
import { minedReceipt } from '../../helpers/receipts.js'

/** Lines the gateway logged, to prove what it never writes down. */
function capturedLogger() {
  const lines: string[] = []
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'))
      done()
    },
  })
  return { logger: createLogger({ level: 'info', daemon: 'rpc-gateway', destination }), lines }
}

let anvil: RunningAnvil
let movedTo: RunningAnvil
let litecoind: RunningLitecoind
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-rpc-gateway-'))
const hostsDir = path.join(tmp, 'hosts')
const LITECOIN_HOST = 'local-rpc-gateway-ltc'

beforeAll(async () => {
  ;[anvil, movedTo, litecoind] = await Promise.all([
    startAnvil(31337),
    startAnvil(31338),
    // Where a `local` host's litecoind keeps its cookie: <hosts>/<host id>/state/data/regtest/.cookie
    startLitecoind(path.join(hostsDir, LITECOIN_HOST, 'state', 'data')),
  ])
}, 60_000)

afterAll(async () => {
  await Promise.all([anvil?.stop(), movedTo?.stop(), litecoind?.stop()])
  fs.rmSync(tmp, { recursive: true, force: true })
})

describe.each(DIALECTS)('rpc-gateway on %s', (dialect) => {
  let t: TestDatabase
  let gateway: RunningRpcGateway
  let relay: OutboxRelay
  let bus: ReturnType<typeof createLocalBus>
  const logs = capturedLogger()
  let userId: string
  let key: string
  let anvilNode: string
  let ltcNode: string
  let endpoint: (nodeId: string) => string

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    bus = createLocalBus()
    relay = new OutboxRelay({ db: t.db, bus, logger: createLogger({ level: 'silent' }), pollIntervalMs: 50 })
    relay.start()
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    gateway = await startRpcGateway({ ...gatewaySettings(tmp), LOCAL_HOSTS_DIR: hostsDir }, { db: t.db, logger: logs.logger, chains, events: { bus } })
    endpoint = (nodeId) => `${gateway.url}/v1/${nodeId}`
    userId = await insertUser(t.db)
    key = (await createApiKey(t.db, { userId, name: 'rpc', scopes: ['nodes:rpc'] })).key
    anvilNode = await insertServingNode(t.db, userId, 'ethereum-anvil', 'full', 'local-rpc-gateway-anvil', anvil.port)
    ltcNode = await insertServingNode(t.db, userId, 'litecoin', 'full', LITECOIN_HOST, litecoind.rpcPort)
  }, 30_000)

  afterAll(async () => {
    await gateway?.stop()
    await relay?.stop()
    await bus?.close()
    await t?.destroy()
  })

  it('serves ethers v6: block number, a signed transaction sent and mined, a batch', async () => {
    const connection = new FetchRequest(endpoint(anvilNode))
    connection.setHeader('X-API-Key', key)
    const provider = new JsonRpcProvider(connection, 31337, { staticNetwork: true, batchMaxCount: 1, pollingInterval: 100 })
    try {
      const before = await provider.getBlockNumber()
      const wallet = new Wallet(DEV_ACCOUNT_KEY, provider)
      const to = Wallet.createRandom().address
      const sent = await wallet.sendTransaction({ to, value: parseEther('1.5') })
      const receipt = await minedReceipt(provider, sent.hash)
      expect(receipt?.status).toBe(1)
      expect(await provider.getBalance(to)).toBe(parseEther('1.5'))
      expect(receipt?.blockNumber).toBeGreaterThan(before)
      expect(Number(await provider.send('eth_blockNumber', []))).toBeGreaterThanOrEqual(receipt?.blockNumber ?? Infinity)
    } finally {
      provider.destroy()
    }

    // ethers batches calls made together into one request.
    const bearer = new FetchRequest(endpoint(anvilNode))
    bearer.setHeader('Authorization', `Bearer ${key}`)
    const batching = new JsonRpcProvider(bearer, 31337, { staticNetwork: true, batchMaxCount: 5, batchStallTime: 20 })
    try {
      const [chainId, height, balance] = await Promise.all([batching.send('eth_chainId', []), batching.getBlockNumber(), batching.getBalance(new Wallet(DEV_ACCOUNT_KEY).address)])
      expect(chainId).toBe('0x7a69')
      expect(height).toBeGreaterThan(0)
      expect(balance).toBeGreaterThan(0n)
    } finally {
      batching.destroy()
    }
  })

  it('refuses denied methods with a JSON-RPC error, alone and inside a batch (the rest of the batch is answered in order)', async () => {
    const single = await rpc(endpoint(anvilNode), 'anvil_setBalance', ['0x0000000000000000000000000000000000000001', '0x1'], { 'X-API-Key': key })
    expect(single.status).toBe(200)
    expect(single.body).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32601 } })
    expect(rpcError(single).message).toContain('anvil_setBalance is not available')
    for (const method of ['admin_nodeInfo', 'personal_listAccounts', 'debug_traceTransaction', 'miner_start', 'hardhat_mine', 'evm_mine']) {
      expect(rpcError(await rpc(endpoint(anvilNode), method, [], { 'X-API-Key': key })).code).toBe(-32601)
    }

    const batch = await post(
      endpoint(anvilNode),
      [
        { jsonrpc: '2.0', id: 'a', method: 'eth_chainId', params: [] },
        { jsonrpc: '2.0', id: 'b', method: 'evm_mine', params: [] },
        { jsonrpc: '2.0', id: 'c', method: 'eth_blockNumber', params: [] },
        { nonsense: true },
      ],
      { 'X-API-Key': key },
    )
    expect(batch.status).toBe(200)
    const answers = batch.body as Array<{ id: unknown; result?: string; error?: { code: number } }>
    expect(answers.map((a) => a.id)).toEqual(['a', 'b', 'c', null])
    expect(answers[0]?.result).toBe('0x7a69')
    expect(answers[1]?.error?.code).toBe(-32601)
    expect(answers[2]?.result).toMatch(/^0x[0-9a-f]+$/)
    expect(answers[3]?.error?.code).toBe(-32600)
  })

  it('proxies plain JSON-RPC to litecoind: getblockchaininfo passes, wallet calls, stop and archive-only calls on a full node are refused', async () => {
    const info = await post(endpoint(ltcNode), { jsonrpc: '1.0', id: 'i', method: 'getblockchaininfo', params: [] }, { 'X-API-Key': key })
    expect(info.status).toBe(200)
    expect((info.body as { result: { chain: string } }).result.chain).toBe('regtest')
    for (const method of ['getbalance', 'sendtoaddress', 'dumpprivkey', 'stop']) {
      const refused = await post(endpoint(ltcNode), { jsonrpc: '1.0', id: method, method, params: [] }, { 'X-API-Key': key })
      expect(refused.status).toBe(200)
      expect(refused.body).toMatchObject({ id: method, error: { code: -32601 } })
    }
    const archiveOnly = await post(endpoint(ltcNode), { jsonrpc: '1.0', id: 1, method: 'getrawtransaction', params: ['00'.repeat(32)] }, { 'X-API-Key': key })
    expect(rpcError(archiveOnly).message).toContain('needs an archive node')
    // litecoind is still up: `stop` never reached it.
    expect(await litecoind.rpc('getblockcount')).toBeTypeOf('number')
  })

  it('authenticates: no key, a token, wrong scope, another user, revoked, expired, key in the path (never logged)', async () => {
    const url = endpoint(anvilNode)
    const noKey = await rpc(url, 'eth_blockNumber')
    expect(noKey.status).toBe(401)
    expect(rpcError(noKey)).toMatchObject({ code: -32001 })
    expect(rpcError(noKey).message).toContain('no API key')

    const token = await rpc(url, 'eth_blockNumber', [], { Authorization: 'Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig' })
    expect(token.status).toBe(401)
    const unknown = await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': `np_${'A'.repeat(43)}` })
    expect(unknown.status).toBe(401)
    expect(rpcError(unknown).message).toContain('not known')

    const readOnly = (await createApiKey(t.db, { userId, name: 'read', scopes: ['nodes:read', 'nodes:write'] })).key
    const wrongScope = await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': readOnly })
    expect(wrongScope.status).toBe(403)
    expect(rpcError(wrongScope)).toMatchObject({ code: -32002 })
    expect(rpcError(wrongScope).message).toContain('nodes:rpc')

    const wildcard = (await createApiKey(t.db, { userId, name: 'all', scopes: ['*'] })).key
    expect((await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': wildcard })).status).toBe(200)

    const other = await insertUser(t.db)
    const otherKey = (await createApiKey(t.db, { userId: other, name: 'other', scopes: ['nodes:rpc'] })).key
    const notYours = await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': otherKey })
    const missing = await rpc(endpoint(crypto.randomUUID()), 'eth_blockNumber', [], { 'X-API-Key': otherKey })
    expect(notYours.status).toBe(404)
    expect(notYours.body).toEqual(missing.body)
    expect(rpcError(notYours).code).toBe(-32004)
    expect((await rpc(endpoint('not-a-uuid'), 'eth_blockNumber', [], { 'X-API-Key': key })).status).toBe(404)

    const revocable = await createApiKey(t.db, { userId, name: 'revocable', scopes: ['nodes:rpc'] })
    expect((await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': revocable.key })).status).toBe(200)
    await t.db('api_keys').where({ id: revocable.apiKey.id }).update({ revoked_at: new Date() })
    const revoked = await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': revocable.key })
    expect(revoked.status).toBe(401)
    expect(rpcError(revoked).message).toContain('revoked')

    const expiring = await createApiKey(t.db, { userId, name: 'expiring', scopes: ['nodes:rpc'] })
    await t.db('api_keys').where({ id: expiring.apiKey.id }).update({ expires_at: new Date(Date.now() - 1_000) })
    const expired = await rpc(url, 'eth_blockNumber', [], { 'X-API-Key': expiring.key })
    expect(expired.status).toBe(401)
    expect(rpcError(expired).message).toContain('expired')

    const inPath = await rpc(`${url}/${key}`, 'eth_chainId')
    expect(inPath.status).toBe(200)
    expect((inPath.body as { result: string }).result).toBe('0x7a69')
    expect((await rpc(`${url}/${readOnly}`, 'eth_chainId')).status).toBe(403)
    expect((await rpc(`${url}/${key}`, 'eth_chainId', [], { 'X-API-Key': wildcard })).status).toBe(401)

    const logged = logs.lines.join('')
    expect(logged).toContain('/v1/' + anvilNode + '/<key>')
    // Refusals get an access line at info; answered calls are counted, and logged only at debug.
    const access = logged
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as { msg?: string; status?: number; path?: string })
      .filter((line) => line.msg === 'request answered')
    expect(access).toContainEqual(expect.objectContaining({ status: 403, path: `/v1/${anvilNode}/<key>` }))
    expect(access.filter((line) => line.status === 200)).toEqual([])
    for (const secret of [key, readOnly, wildcard, otherKey, revocable.key, expiring.key]) expect(logged).not.toContain(secret)
  })

  it('limits: malformed JSON 400, oversized body 413, too long a batch 400, a non-POST 405; nothing reaches the node', async () => {
    const headers = { 'X-API-Key': key }
    const malformed = await post(endpoint(anvilNode), '{"jsonrpc":"2.0",', headers)
    expect(malformed.status).toBe(400)
    expect(rpcError(malformed).code).toBe(-32700)
    const noMethod = await post(endpoint(anvilNode), { jsonrpc: '2.0', id: 7 }, headers)
    expect(noMethod.status).toBe(400)
    expect(noMethod.body).toMatchObject({ id: 7, error: { code: -32600 } })

    const oversized = await post(endpoint(anvilNode), { jsonrpc: '2.0', id: 1, method: 'eth_call', params: [{ data: `0x${'00'.repeat(16 * 1024)}` }] }, headers)
    expect(oversized.status).toBe(413)
    expect(rpcError(oversized).message).toContain('too large')

    const batch = Array.from({ length: 6 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'eth_blockNumber', params: [] }))
    const tooLong = await post(endpoint(anvilNode), batch, headers)
    expect(tooLong.status).toBe(400)
    expect(rpcError(tooLong).message).toContain('at most 5')
    expect((await post(endpoint(anvilNode), [], headers)).status).toBe(400)

    const get = await fetch(endpoint(anvilNode), { headers })
    expect(get.status).toBe(405)
    expect(((await get.json()) as { error: { code: number } }).error.code).toBe(-32600)
    const unknownPath = await fetch(`${gateway.url}/nowhere`)
    expect(unknownPath.status).toBe(404)
    expect(((await unknownPath.json()) as { jsonrpc: string }).jsonrpc).toBe('2.0')
  })

  it('rate-limits per key across gateways sharing the database: 429 with Retry-After, one token per call of a batch', async () => {
    const small = gatewaySettings(tmp, { RPC_GATEWAY_RATE_LIMIT_PER_SECOND: 1, RPC_GATEWAY_RATE_LIMIT_BURST: 4 })
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    const silent = createLogger({ level: 'silent' })
    const a = await startRpcGateway(small, { db: t.db, logger: silent, chains })
    try {
      const b = await startRpcGateway(small, { db: t.connect(), logger: silent, chains })
      try {
        const limited = (await createApiKey(t.db, { userId, name: 'limited', scopes: ['nodes:rpc'] })).key
        const headers = { 'X-API-Key': limited }
        const two = [1, 2].map((id) => ({ jsonrpc: '2.0', id, method: 'eth_blockNumber', params: [] }))
        expect((await post(`${a.url}/v1/${anvilNode}`, two, headers)).status).toBe(200)
        expect((await rpc(`${b.url}/v1/${anvilNode}`, 'eth_blockNumber', [], headers)).status).toBe(200)
        expect((await rpc(`${a.url}/v1/${anvilNode}`, 'eth_blockNumber', [], headers)).status).toBe(200)
        const over = await rpc(`${b.url}/v1/${anvilNode}`, 'eth_blockNumber', [], headers)
        expect(over.status).toBe(429)
        expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
        expect(rpcError(over)).toMatchObject({ code: -32005 })
        // Another key has its own bucket.
        expect((await rpc(`${b.url}/v1/${anvilNode}`, 'eth_blockNumber', [], { 'X-API-Key': key })).status).toBe(200)
      } finally {
        await b.stop()
      }
    } finally {
      await a.stop()
    }
  })

  it('counts usage per node and per key on /metrics (ids only, never a key)', async () => {
    const counted = (await createApiKey(t.db, { userId, name: 'counted', scopes: ['nodes:rpc'] }))
    const headers = { 'X-API-Key': counted.key }
    await rpc(endpoint(anvilNode), 'eth_blockNumber', [], headers)
    await post(endpoint(anvilNode), [1, 2, 3].map((id) => ({ jsonrpc: '2.0', id, method: 'eth_chainId', params: [] })), headers)
    await post(endpoint(anvilNode), '{', headers)
    await rpc(endpoint(crypto.randomUUID()), 'eth_blockNumber', [], headers)
    const text = await (await fetch(`${gateway.url}/metrics`)).text()
    const labels = `node_id="${anvilNode}",api_key_id="${counted.apiKey.id}"`
    expect(text).toContain(`rpc_gateway_requests_total{${labels},outcome="ok",daemon="rpc-gateway"} 2`)
    expect(text).toContain(`rpc_gateway_calls_total{${labels},daemon="rpc-gateway"} 4`)
    expect(text).toMatch(new RegExp('rpc_gateway_request_duration_seconds_count\\{daemon="rpc-gateway",node_id="' + anvilNode + '"\\} [1-9]'))
    // A malformed body is refused before the node is looked up, and an unknown node is no series.
    expect(text).not.toContain('outcome="refused"')
    expect(text).not.toContain(counted.key)
  })

  it('answers 503 with Retry-After while the node is not serving, and follows it to its new host after a move (through the health events)', async () => {
    const url = endpoint(anvilNode)
    const headers = { 'X-API-Key': key }
    expect((await rpc(url, 'eth_chainId', [], headers)).body).toMatchObject({ result: '0x7a69' })

    // The migration's shape: maintenance, the new host and its configure recorded, then syncing.
    await t.db.transaction((trx) => forceNodeState(trx, { nodeId: anvilNode, state: 'maintenance', reason: 'migration: test', now: new Date() }))
    const notServing = await waitFor(async () => {
      const answer = await rpc(url, 'eth_chainId', [], headers)
      return answer.status === 503 ? answer : undefined
    }, 'the gateway to see maintenance', 10_000, 25)
    expect(notServing.headers.get('retry-after')).toBe('5')
    expect(rpcError(notServing)).toMatchObject({ code: -32010 })
    expect(rpcError(notServing).message).toContain('maintenance')

    await t.db('nodes').where({ id: anvilNode }).update({ host_id: 'local-rpc-gateway-anvil-2' })
    await recordConfigure(t.db, anvilNode, movedTo.port)
    await t.db.transaction((trx) => forceNodeState(trx, { nodeId: anvilNode, state: 'syncing', reason: 'migrated to a new host', now: new Date() }))
    const moved = await waitFor(async () => {
      const answer = await rpc(url, 'eth_chainId', [], headers)
      return answer.status === 200 ? answer : undefined
    }, 'the gateway to follow the move', 10_000, 25)
    expect(moved.body).toMatchObject({ result: '0x7a6a' })
  })
})
