import fs from 'node:fs'
import path from 'node:path'
import nacl from 'tweetnacl'
import { describe, expect, it } from 'vitest'
import type { Dialect } from '../helpers/db.js'
import { assertLitecoindInstalled, hdSeedIdOf, nodeRpc } from '../helpers/litecoind.js'
import { waitFor } from '../helpers/ports.js'
import { useJourneyStack } from './chain-journey-stack.js'

/**
 * The litecoin journey through the built binary on `nodeplane up`, per database (SQLite:
 * litecoin-journey.test.ts, Postgres: litecoin-journey-postgres.test.ts): `chain list` offers it;
 * a node bought with the test card provider comes up healthy on Debian's real litecoind
 * (regtest), with the wallet it created itself; blocks mined to that wallet with generatetoaddress
 * make its balance; an operator's migration backs the node up live and moves it to a new host,
 * where the chain, the balance and the wallet's seed are intact; `keys export`
 * (POST /api/v1/nodes/{id}/keys/export, with a key of scope keys:export) returns the wallet's seed
 * sealed to the caller's key, which opens to the seed the wallet runs on.
 */
export function litecoinJourneySuite(dialect: Dialect): void {
  describe(`the litecoin journey on nodeplane up (${dialect})`, () => {
    const s = useJourneyStack(dialect)

    const rpc = async <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> => nodeRpc<T>(await s.stateDir(nodeId), method, params, wallet)
    /** Once litecoind answers on the node's current host (a start returns before its RPC and wallet are up). */
    const answer = <T>(nodeId: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> =>
      waitFor(() => rpc<T>(nodeId, method, params, wallet).then((value) => ({ value }), () => undefined), `${method} to answer`, 30_000, 200).then((r) => r.value)

    it('bought and healthy; mined to its own wallet; a live backup and a migration keep the balance; keys export returns the wallet seed sealed to the caller', { timeout: 150_000 }, async () => {
      assertLitecoindInstalled()
      const catalogue = s.json<{ chains: Array<{ id: string; node_types: string[]; default_version: string }> }>(await s.run(['chain', 'list', '--json']))
      expect(catalogue.chains.find((c) => c.id === 'litecoin')).toMatchObject({ default_version: '0.21.2.1', node_types: ['full', 'archive'] })

      const node = await s.untilBought(await s.subscribeAndPay('litecoin', 'full'), 'litecoin')
      expect(node.binary_version).toBe('0.21.2.1')

      // The wallet the node created itself; 101 blocks mined to it make the first reward spendable.
      expect(await answer<string[]>(node.id, 'listwallets')).toEqual(['nodeplane'])
      const address = await rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')
      await rpc(node.id, 'generatetoaddress', [101, address])
      expect(await rpc<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
      const { hdseedid } = await rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')
      await s.untilHealthy(node.id, 'the node healthy at block 101')

      // An operator moves it: a live backup of the running node, restored on a new host.
      const firstHost = await s.hostId(node.id)
      const migrate = s.json<{ run_id: string; created: boolean }>(await s.run(['node', 'migrate', '--node', node.id, '--reason', 'e2e: move the litecoin node', '--json']))
      expect(migrate.created).toBe(true)
      expect(await s.untilRun(migrate.run_id, 120_000)).toMatchObject({ status: 'completed', result: { outcome: 'migrated', restored: true, backup: { taken: true } } })
      expect(await s.hostId(node.id)).not.toBe(firstHost)
      expect(await answer<number>(node.id, 'getblockcount')).toBe(101)
      expect(await answer<number>(node.id, 'getbalance', [], 'nodeplane')).toBe(50)
      expect((await answer<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
      await s.untilHealthy(node.id, 'the migrated node healthy')

      // keys export with a key of the owner's (the operator bought the node) that may export.
      const exporter = s.json<{ key: string }>(await s.run(['api-key', 'create', '--name', 'key export', '--scopes', 'keys:export', '--json']))
      const recipient = nacl.box.keyPair()
      const exported = await fetch(`${s.stack.api_url}/api/v1/nodes/${node.id}/keys/export`, {
        method: 'POST',
        headers: { authorization: `Bearer ${exporter.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') }),
      })
      const text = await exported.text()
      expect(exported.status, text).toBe(200)
      const keys = (JSON.parse(text) as { keys: { name: string; key_type: string; sealed: string }[] }).keys
      expect(keys.map((k) => [k.name, k.key_type])).toEqual([['wallet_seed', 'opaque']])
      const blob = new Uint8Array(Buffer.from(keys[0]?.sealed ?? '', 'base64'))
      const opened = nacl.box.open(blob.subarray(56), blob.subarray(32, 56), blob.subarray(0, 32), recipient.secretKey)
      if (!opened) throw new Error('the exported key does not open with the recipient key')
      const seed = Buffer.from(opened).toString('utf8').trim()
      // The seed the wallet runs on, and on the host only in the captured file: never in the answer.
      expect(hdSeedIdOf(seed)).toBe(hdseedid)
      expect(fs.readFileSync(path.join(await s.stateDir(node.id), 'data', 'wallet-seed.wif'), 'utf8').trim()).toBe(seed)
      expect(text).not.toContain(seed)
    })
  })
}
