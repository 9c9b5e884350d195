/**
 * The litecoin profile on the real Litecoin Core (Debian's litecoind, regtest, offline) through
 * the provisioning harness: provisioned until `healthy`; blocks mined to the wallet the node
 * created itself; its HD seed captured sealed to the server key, matching the wallet and
 * returned by keys export sealed to the caller; a live backup and a migration, then a host killed
 * outright and a migration from that backup; the wallet's balance intact after both. A host killed
 * before any backup: the node on the new host takes its wallet back from the captured seed.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import nacl from 'tweetnacl'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { getProfile, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { createLogger } from '../../../src/log.js'
import { findNode, insertNode } from '../../../src/nodes/node-store.js'
import { requestMigration, requestProvision } from '../../../src/provisioning/index.js'
import { loadDataKey } from '../../../src/secrets/data-keys.js'
import { decryptNodeKey } from '../../../src/secrets/node-keys.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { assertLitecoindInstalled } from '../../helpers/litecoind.js'
import { waitFor } from '../../helpers/ports.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources } from '../http/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished, type LifecycleSetting } from '../provisioning/harness.js'

const quiet = createLogger({ level: 'silent' })

describeEachDialectConcurrently('the litecoin chain on litecoind on %s', (dialect) => {
  const resources = new Resources()
  let t: TestDatabase
  let db: Db
  let setting: LifecycleSetting
  let worker: WorkflowWorker
  let evaluator: NodeJS.Timeout
  let evaluating = Promise.resolve()
  let api: { url: string }

  beforeAll(async () => {
    assertLitecoindInstalled()
    t = await createTestDatabase(dialect)
    db = t.db
    setting = await lifecycleSetting(db, { migrationCooldownMs: 3_600_000 })
    setting.deps = { ...setting.deps, chains: staticChainSource(withSmallKeypool(setting.deps.chains.current())) }
    worker = startLifecycleWorker(db, setting.deps)
    // The heartbeat evaluation, as the health-evaluator runs it: a synced node becomes healthy.
    evaluator = setInterval(() => {
      evaluating = evaluating.then(() => evaluateHeartbeats(db, { now: new Date(), heartbeatTimeoutMs: 60_000, intervalMs: 250, logger: quiet })).then(
        () => undefined,
        () => undefined,
      )
    }, 250)
    const { authenticate } = authenticatorFromSettings(
      { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
      { db },
    )
    api = await resources.api({ db, authenticate, rateLimit: createApiRateLimiter({ perMinute: 10_000 }).rateLimit, routes: controlPlaneRoutes({ db, masterKey: setting.masterKey }) })
  }, 60_000)
  afterAll(async () => {
    clearInterval(evaluator)
    await evaluating
    await worker?.stop()
    for (const host of fs.existsSync(setting?.root ?? '') ? fs.readdirSync(setting.root) : []) await setting.provider.destroyHost(host)
    await setting?.gateway.stop()
    await resources.cleanup()
    await t?.destroy()
  })

  const stateDirOf = async (nodeId: string) => path.join(setting.root, String((await findNode(db, nodeId))?.host_id), 'state')

  /** JSON-RPC to the node's litecoind, with the cookie it wrote, as a user on the host would. */
  async function rpc<T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> {
    const state = await stateDirOf(nodeId)
    const port = /^rpcport=(\d+)$/m.exec(fs.readFileSync(path.join(state, 'config', 'litecoin.conf'), 'utf8'))?.[1]
    const cookie = fs.readFileSync(path.join(state, 'data', 'regtest', '.cookie'), 'utf8').trim()
    const response = await fetch(`http://127.0.0.1:${port}${wallet ? `/wallet/${wallet}` : '/'}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(cookie).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '1.0', id: 0, method, params }),
    })
    const answer = (await response.json()) as { result: T; error: { code: number; message: string } | null }
    if (answer.error) throw new Error(`${method}: ${answer.error.code} ${answer.error.message}`)
    return answer.result
  }

  const untilHealthy = (nodeId: string, what: string) =>
    waitFor(async () => {
      const node = await findNode(db, nodeId)
      return node?.state === 'healthy' && node.sync_status === 'synced' && node
    }, what, 60_000, 100)

  /** Once the node answers: `start` returns once litecoind stayed up a moment, before its RPC and wallet are up. */
  const answer = <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string) =>
    waitFor(() => rpc<T>(nodeId, method, params, wallet).then((value) => ({ value })), `${method} to answer`, 30_000, 200).then((r) => r.value)

  async function provisionedLitecoinNode(): Promise<{ id: string; userId: string }> {
    const user = await newUser(db)
    const subscriptionId = await insertSubscription(db, user.id)
    await db('subscriptions').where({ id: subscriptionId }).update({ chain_profile_id: 'litecoin' })
    const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'litecoin', node_type: 'full' })
    const run = await untilRunFinished(db, (await requestProvision(db, node.id)).run.id, 120_000)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'provisioned', binary_version: '0.21.2.1', keys: { captured: ['wallet_seed'] } })
    await untilHealthy(node.id, 'the litecoin node to be healthy')
    return { id: node.id, userId: user.id }
  }

  it('provisioned healthy; mined to its own wallet; the captured seed is the wallet\'s and keys export returns it sealed; backup, migration and a killed host keep the balance', { timeout: 180_000 }, async () => {
    const node = await provisionedLitecoinNode()

    // The wallet the node created itself; blocks mined to it: 101 blocks make the first reward spendable.
    expect(await rpc<string[]>(node.id, 'listwallets')).toEqual(['nodeplane'])
    const address = await rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')
    await rpc(node.id, 'generatetoaddress', [101, address])
    expect(await rpc<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)

    // The captured key is the wallet's HD seed: its public key's hash is the wallet's hdseedid.
    const dataKey = await loadDataKey(db, setting.masterKey, node.id)
    const captured = (await decryptNodeKey(db, dataKey, 'wallet_seed')).toString('utf8')
    dataKey.destroy()
    const { hdseedid } = await rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')
    expect(seedIdOf(captured.trim())).toBe(hdseedid)
    const state = await stateDirOf(node.id)
    expect(fs.readFileSync(path.join(state, 'data', 'wallet-seed.wif'), 'utf8')).toBe(captured)
    expect(fs.statSync(path.join(state, 'data', 'wallet-seed.wif')).mode & 0o777).toBe(0o600)
    // The dump the seed came from is gone, and neither the seed nor the cookie reached the agent's log.
    expect(fs.readdirSync(path.join(state, 'data')).filter((f) => f.startsWith('.nodeplane-export-'))).toEqual([])
    const agentLog = fs.readFileSync(path.join(path.dirname(state), 'agent.log'), 'utf8')
    expect(agentLog).toContain('exported the wallet seed for capture')
    expect(agentLog).not.toContain(captured.trim())
    expect(agentLog).not.toContain(fs.readFileSync(path.join(state, 'data', 'regtest', '.cookie'), 'utf8').trim().split(':')[1])

    // keys export: the wallet's seed, sealed to the caller's key.
    const token = (await newKey(db, node.userId, { scopes: ['keys:export'] })).key
    const recipient = nacl.box.keyPair()
    const exported = await getJson(`${api.url}/api/v1/nodes/${node.id}/keys/export`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') }),
    })
    expect(exported.status).toBe(200)
    const keys = (exported.body as { keys: { name: string; key_type: string; sealed: string }[] }).keys
    expect(keys.map((k) => [k.name, k.key_type])).toEqual([['wallet_seed', 'opaque']])
    const blob = new Uint8Array(Buffer.from(keys[0]!.sealed, 'base64'))
    const opened = nacl.box.open(blob.subarray(56), blob.subarray(32, 56), blob.subarray(0, 32), recipient.secretKey)
    expect(opened && Buffer.from(opened).toString('utf8')).toBe(captured)
    expect(JSON.stringify(exported.body)).not.toContain(captured.trim())

    // A live backup of the running node and a migration: the new host restores it.
    const first = await untilRunFinished(db, (await requestMigration(db, node.id, { reason: 'test: move the litecoin node' })).run.id, 120_000)
    expect(first.status, first.error ?? '').toBe('completed')
    expect(first.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: true } })
    expect(await answer<number>(node.id, 'getblockcount')).toBe(101)
    expect(await answer<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
    expect((await answer<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    await untilHealthy(node.id, 'the migrated node to be healthy')

    // The host dies outright (agent and chain): no backup can be taken now; the snapshot of the
    // last migration is restored on the next host.
    const hostDir = path.dirname(await stateDirOf(node.id))
    const { pid } = JSON.parse(fs.readFileSync(path.join(hostDir, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-pid, 'SIGKILL')
    await db('nodes').where({ id: node.id }).update({ state: 'down' })
    const second = await untilRunFinished(db, (await requestMigration(db, node.id, { reason: 'test: host killed', force: true })).run.id, 120_000)
    expect(second.status, second.error ?? '').toBe('completed')
    expect(second.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: false } })
    expect(await answer<number>(node.id, 'getblockcount')).toBe(101)
    expect(await answer<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
    expect((await answer<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    await untilHealthy(node.id, 'the node on its third host to be healthy')
  })

  it('a host killed before any backup: the new host starts a new chain, and the node takes its wallet back from the captured seed', { timeout: 120_000 }, async () => {
    const node = await provisionedLitecoinNode()
    // The wallet's first address: the same seed derives it again on the new host.
    const address = await rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')
    const { hdseedid } = await rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')
    const hostDir = path.dirname(await stateDirOf(node.id))
    const { pid } = JSON.parse(fs.readFileSync(path.join(hostDir, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-pid, 'SIGKILL')
    await db('nodes').where({ id: node.id }).update({ state: 'down' })

    const run = await untilRunFinished(db, (await requestMigration(db, node.id, { reason: 'test: host gone, no snapshot' })).run.id, 120_000)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: false, keys_injected: ['wallet_seed'] })
    expect(await answer<number>(node.id, 'getblockcount')).toBe(0)
    expect(await answer<string[]>(node.id, 'listwallets')).toEqual(['nodeplane'])
    expect((await rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    expect(await rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')).toBe(address)
    const state = await stateDirOf(node.id)
    expect(fs.existsSync(path.join(state, 'key-restores.json'))).toBe(false)
    expect(fs.readFileSync(path.join(path.dirname(state), 'agent.log'), 'utf8')).toContain('the node took its wallet back from the captured seed')
    await untilHealthy(node.id, 'the node on its new host to be healthy')
  })
})

/**
 * The catalogue with litecoind's wallet keypool at 100 keys instead of 1,000: creating, dumping and
 * backing up the wallet take a fraction as long, and nothing this test checks depends on the
 * keypool's size (the seed, the balance and the derivation of every key are the same).
 */
function withSmallKeypool(catalogue: ChainCatalogue): ChainCatalogue {
  const litecoin = getProfile(catalogue, 'litecoin')
  if (!litecoin.config_files.some((f) => f.template.includes('\nserver=1\n'))) throw new Error('the litecoin profile no longer sets server=1 in its config')
  const smaller = { ...litecoin, config_files: litecoin.config_files.map((f) => ({ ...f, template: f.template.replace('\nserver=1\n', '\nserver=1\nkeypool=100\n') })) }
  return { ...catalogue, profiles: new Map([...catalogue.profiles, ['litecoin', smaller]]) }
}

/** hash160 of the compressed public key of a WIF private key: the `hdseedid` Bitcoin Core reports for that seed. */
function seedIdOf(wif: string): string {
  const decoded = base58(wif)
  const payload = decoded.subarray(0, -4)
  const checksum = crypto.createHash('sha256').update(crypto.createHash('sha256').update(payload).digest()).digest().subarray(0, 4)
  expect(checksum.equals(decoded.subarray(-4))).toBe(true)
  // version byte, 32-byte key, 0x01 (compressed)
  expect(payload.length).toBe(34)
  const ecdh = crypto.createECDH('secp256k1')
  ecdh.setPrivateKey(payload.subarray(1, 33))
  const publicKey = ecdh.getPublicKey(null, 'compressed')
  // A uint160 shown the way Bitcoin Core shows hashes: its bytes in reverse.
  return Buffer.from(crypto.createHash('ripemd160').update(crypto.createHash('sha256').update(publicKey).digest()).digest()).reverse().toString('hex')
}

function base58(text: string): Buffer {
  const alphabet = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
  let n = 0n
  for (const c of text) {
    const digit = alphabet.indexOf(c)
    if (digit < 0) throw new Error(`not base58: ${c}`)
    n = n * 58n + BigInt(digit)
  }
  const hex = n.toString(16)
  const bytes = Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex')
  const zeros = text.length - text.replace(/^1+/, '').length
  return Buffer.concat([Buffer.alloc(zeros), bytes])
}
