/**
 * A litecoin node whose host dies before any backup was taken (the real litecoind, both
 * databases): the migration starts a new regtest chain on the new host, and the node takes its
 * wallet back from the seed provisioning captured: the same hdseedid, the same first address.
 */
import fs from 'node:fs'
import path from 'node:path'
import { expect, it } from 'vitest'
import { requestMigration } from '../../../src/provisioning/index.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { untilRunFinished } from '../provisioning/harness.js'
import { useLitecoinStack } from './litecoin-harness.js'

describeEachDialectConcurrently('a litecoin node migrated without a snapshot on %s', (dialect) => {
  const stack = useLitecoinStack(dialect)

  it('a host killed before any backup: the new host starts a new chain, and the node takes its wallet back from the captured seed', { timeout: 120_000 }, async () => {
    const node = await stack.provisionedLitecoinNode()
    // The wallet's first address: the same seed derives it again on the new host.
    const address = await stack.rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')
    const { hdseedid } = await stack.rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')
    await stack.killHost(node.id)
    await stack.db('nodes').where({ id: node.id }).update({ state: 'down' })

    const run = await untilRunFinished(stack.db, (await requestMigration(stack.db, node.id, { reason: 'test: host gone, no snapshot' })).run.id, 120_000)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: false, keys_injected: ['wallet_seed'] })
    expect(await stack.answer<number>(node.id, 'getblockcount')).toBe(0)
    expect(await stack.answer<string[]>(node.id, 'listwallets')).toEqual(['nodeplane'])
    expect((await stack.rpc<{ hdseedid: string }>(node.id, 'getwalletinfo', [], 'nodeplane')).hdseedid).toBe(hdseedid)
    expect(await stack.rpc<string>(node.id, 'getnewaddress', [], 'nodeplane')).toBe(address)
    const state = await stack.stateDirOf(node.id)
    expect(fs.existsSync(path.join(state, 'key-restores.json'))).toBe(false)
    expect(fs.readFileSync(path.join(path.dirname(state), 'agent.log'), 'utf8')).toContain('the node took its wallet back from the captured seed')
    await stack.untilHealthy(node.id, 'the node on its new host to be healthy')
  })
})
