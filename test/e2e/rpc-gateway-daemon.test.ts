/**
 * `nodeplane daemon rpc-gateway` as its own process, on both databases, with NATS: it serves a
 * node's endpoint (key in the path, never logged), follows the node to a new host when the
 * health event reaches it through NATS (the route TTL is an hour, so nothing else could), and
 * stops cleanly on SIGTERM.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createApiKey } from '../../src/auth/api-keys.js'
import type { EventBus } from '../../src/events/bus.js'
import { connectNatsBus } from '../../src/events/nats-bus.js'
import { OutboxRelay } from '../../src/events/relay.js'
import { createLogger } from '../../src/log.js'
import { forceNodeState } from '../../src/nodes/health-state-machine.js'
import { jsonLogLines, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertUser } from '../helpers/fixtures.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'
import { insertServingNode, recordConfigure, rpc, startAnvil, type RunningAnvil } from '../helpers/rpc-gateway-fixtures.js'

let nats: NatsServer
let anvil: RunningAnvil
let movedTo: RunningAnvil

beforeAll(async () => {
  ;[nats, anvil, movedTo] = await Promise.all([startNats(), startAnvil(31337), startAnvil(31338)])
}, 60_000)

afterAll(async () => {
  await Promise.all([nats?.stop(), anvil?.stop(), movedTo?.stop()])
})

describe.each(DIALECTS)('nodeplane daemon rpc-gateway on %s', (dialect) => {
  let t: TestDatabase
  let bus: EventBus
  let relay: OutboxRelay

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    bus = await connectNatsBus({ url: nats.url, logger: createLogger({ level: 'silent' }), name: 'rpc-gateway-e2e' })
    relay = new OutboxRelay({ db: t.db, bus, logger: createLogger({ level: 'silent' }), pollIntervalMs: 50 })
    relay.start()
  })

  afterAll(async () => {
    await relay?.stop()
    await bus?.close()
    await t?.destroy()
  })

  it('serves a node through the key in its URL, follows it to its new host by the NATS health event, and stops on SIGTERM', async () => {
    const userId = await insertUser(t.db)
    const { key } = await createApiKey(t.db, { userId, name: 'wallet', scopes: ['nodes:rpc'] })
    const nodeId = await insertServingNode(t.db, userId, 'ethereum-anvil', 'full', 'local-e2e-anvil', anvil.port)
    const port = await freePort()
    const child = spawnNodeplane(['daemon', 'rpc-gateway'], {
      env: { DATABASE_URL: t.url, NATS_URL: nats.url, NODEPLANE_DATA_DIR: tempDir(), RPC_GATEWAY_PORT: String(port), RPC_GATEWAY_ROUTE_TTL: '1h' },
    })
    try {
      const base = `http://127.0.0.1:${port}`
      await waitFor(async () => (await fetch(`${base}/health`).catch(() => undefined))?.ok, 'rpc-gateway to listen', 20_000)
      expect((await fetch(`${base}/readyz`)).status).toBe(200)
      const url = `${base}/v1/${nodeId}/${key}`
      expect((await rpc(url, 'eth_chainId')).body).toMatchObject({ result: '0x7a69' })

      await t.db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'maintenance', reason: 'migration: e2e', now: new Date() }))
      await waitFor(async () => (await rpc(url, 'eth_chainId')).status === 503, 'the gateway to see maintenance', 10_000, 25)
      await t.db('nodes').where({ id: nodeId }).update({ host_id: 'local-e2e-anvil-2' })
      await recordConfigure(t.db, nodeId, movedTo.port)
      await t.db.transaction((trx) => forceNodeState(trx, { nodeId, state: 'syncing', reason: 'migrated to a new host', now: new Date() }))
      const moved = await waitFor(async () => {
        const answer = await rpc(url, 'eth_chainId')
        return answer.status === 200 ? answer : undefined
      }, 'the gateway to follow the move', 10_000, 25)
      expect(moved.body).toMatchObject({ result: '0x7a6a' })
    } finally {
      child.kill('SIGTERM')
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    const lines = jsonLogLines(result.all)
    expect(lines.some((l) => l.msg === 'rpc gateway following node health events on NATS')).toBe(true)
    expect(String(result.all)).not.toContain(key)
  })
})
