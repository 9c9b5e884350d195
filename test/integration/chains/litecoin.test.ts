/**
 * The litecoin profile on the real Litecoin Core (Debian's litecoind, regtest, offline) through
 * the provisioning harness: provisioned until `healthy`; blocks mined to the wallet the node
 * created itself; its HD seed captured sealed to the server key, matching the wallet and
 * returned by keys export sealed to the caller; a live backup and a migration, then a host killed
 * outright and a migration from that backup; the wallet's balance intact after both.
 */
import fs from 'node:fs'
import path from 'node:path'
import nacl from 'tweetnacl'
import { expect, it } from 'vitest'
import { requestMigration } from '../../../src/provisioning/index.js'
import { loadDataKey } from '../../../src/secrets/data-keys.js'
import { decryptNodeKey } from '../../../src/secrets/node-keys.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { hdSeedIdOf } from '../../helpers/litecoind.js'
import { newKey } from '../auth/api-harness.js'
import { getJson } from '../http/harness.js'
import { untilRunFinished } from '../provisioning/harness.js'
import { useLitecoinStack } from './litecoin-harness.js'

describeEachDialectConcurrently('the litecoin chain on litecoind on %s', (dialect) => {
  const stack = useLitecoinStack(dialect)

  it('provisioned healthy; mined to its own wallet; the captured seed is the wallet\'s and keys export returns it sealed; backup, migration and a killed host keep the balance', { timeout: 180_000 }, async () => {
    const node = await stack.provisionedLitecoinNode()

    // The wallet the node created itself; blocks mined to it: 101 blocks make the first reward spendable.
    expect(await stack.rpc<string[]>(node.id, 'listwallets')).toEqual(['nodeplane'])
    const address = await stack.rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')
    await stack.rpc(node.id, 'generatetoaddress', [101, address])
    expect(await stack.rpc<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)

    // The captured key is the wallet's HD seed: its public key's hash is the wallet's hdseedid.
    const dataKey = await loadDataKey(stack.db, stack.setting.masterKey, node.id)
    const captured = (await decryptNodeKey(stack.db, dataKey, 'wallet_seed')).toString('utf8')
    dataKey.destroy()
    const { hdseedid } = await stack.rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')
    expect(hdSeedIdOf(captured.trim())).toBe(hdseedid)
    const state = await stack.stateDirOf(node.id)
    expect(fs.readFileSync(path.join(state, 'data', 'wallet-seed.wif'), 'utf8')).toBe(captured)
    expect(fs.statSync(path.join(state, 'data', 'wallet-seed.wif')).mode & 0o777).toBe(0o600)
    // The dump the seed came from is gone, and neither the seed nor the cookie reached the agent's log.
    expect(fs.readdirSync(path.join(state, 'data')).filter((f) => f.startsWith('.nodeplane-export-'))).toEqual([])
    const agentLog = fs.readFileSync(path.join(path.dirname(state), 'agent.log'), 'utf8')
    expect(agentLog).toContain('exported the wallet seed for capture')
    expect(agentLog).not.toContain(captured.trim())
    expect(agentLog).not.toContain(fs.readFileSync(path.join(state, 'data', 'regtest', '.cookie'), 'utf8').trim().split(':')[1])

    // keys export: the wallet's seed, sealed to the caller's key.
    const token = (await newKey(stack.db, node.userId, { scopes: ['keys:export'] })).key
    const recipient = nacl.box.keyPair()
    const exported = await getJson(`${stack.apiUrl}/api/v1/nodes/${node.id}/keys/export`, {
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
    const first = await untilRunFinished(stack.db, (await requestMigration(stack.db, node.id, { reason: 'test: move the litecoin node' })).run.id, 120_000)
    expect(first.status, first.error ?? '').toBe('completed')
    expect(first.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: true } })
    expect(await stack.answer<number>(node.id, 'getblockcount')).toBe(101)
    expect(await stack.answer<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
    expect((await stack.answer<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    await stack.untilHealthy(node.id, 'the migrated node to be healthy')

    // The host dies outright (agent and chain): no backup can be taken now; the snapshot of the
    // last migration is restored on the next host.
    await stack.killHost(node.id)
    await stack.db('nodes').where({ id: node.id }).update({ state: 'down' })
    const second = await untilRunFinished(stack.db, (await requestMigration(stack.db, node.id, { reason: 'test: host killed', force: true })).run.id, 120_000)
    expect(second.status, second.error ?? '').toBe('completed')
    expect(second.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: false } })
    expect(await stack.answer<number>(node.id, 'getblockcount')).toBe(101)
    expect(await stack.answer<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
    expect((await stack.answer<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    await stack.untilHealthy(node.id, 'the node on its third host to be healthy')
  })
})
