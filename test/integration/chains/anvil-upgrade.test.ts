/**
 * Rollouts of real anvil nodes (both databases): the shipped manifest upgrades/ethereum-anvil/
 * anvil-1.7.1.yaml takes two nodes created on 1.7.0 to 1.7.1, a canary first, keeping their
 * transactions; a deliberately broken artifact is rolled back by the agent with the chain intact.
 * The nodes are created on 1.7.0 (the catalogue's default set to it here): the profile's default
 * 1.5.1 cannot be upgraded to 1.7.x in place (anvil-node.test.ts, docs/chains.md).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { Wallet, parseEther, type JsonRpcProvider, type TransactionReceipt } from 'ethers'
import { beforeAll, expect, it } from 'vitest'
import { getProfile } from '../../../src/config/chains.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { startRollout } from '../../../src/rollouts/control.js'
import { createRollout } from '../../../src/rollouts/create.js'
import { insertRollout, listRolloutNodes, requireRollout, type RolloutRecord } from '../../../src/rollouts/store.js'
import { DEV_ACCOUNT_KEY, withAnvil } from '../../helpers/anvil.js'
import { useChainHarness } from '../../helpers/chain-harness.js'
import { tempDir } from '../../helpers/cli.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertUser } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { minedReceipt } from '../../helpers/receipts.js'

describeEachDialectConcurrently('rollouts of ethereum-anvil nodes on %s', (dialect) => {
  const h = useChainHarness(dialect, {
    rollouts: true,
    concurrency: 8,
    catalogue: (catalogue) => ({ ...catalogue, profiles: new Map([...catalogue.profiles, ['ethereum-anvil', { ...getProfile(catalogue, 'ethereum-anvil'), default_version: '1.7.0' }]]) }),
  })
  let operatorId: string
  const nodes: string[] = []
  const sent = new Map<string, TransactionReceipt>()
  const recipient = Wallet.createRandom().address

  beforeAll(async () => {
    operatorId = await insertUser(h.db)
    for (let i = 0; i < 2; i++) {
      const { node } = await h.newNode('ethereum-anvil')
      await requestProvision(h.db, node.id)
      nodes.push(node.id)
    }
  })

  async function allHealthy(what: string): Promise<void> {
    await waitFor(async () => {
      const rows = (await h.db('nodes').whereIn('id', nodes).select('state')) as { state: string }[]
      if (rows.some((r) => r.state === 'failed')) throw new Error('a node failed')
      return rows.every((r) => r.state === 'healthy')
    }, what, 60_000, 100)
  }

  const withChain = async <T>(nodeId: string, use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> => withAnvil(await h.stateDirOf(nodeId), use)

  /** Each node's client version and its transaction, mined before the rollouts, at the same block. */
  async function expectEveryNode(clientVersion: string): Promise<void> {
    for (const nodeId of nodes) {
      await withChain(nodeId, async (provider) => {
        expect(await provider.send('web3_clientVersion', [])).toBe(clientVersion)
        const receipt = sent.get(nodeId) as TransactionReceipt
        expect(await provider.getTransactionReceipt(receipt.hash)).toMatchObject({ blockNumber: receipt.blockNumber, blockHash: receipt.blockHash, status: 1 })
        expect(await provider.getBalance(recipient)).toBe(parseEther('2'))
      })
    }
  }

  const ended = (id: string): Promise<RolloutRecord> =>
    waitFor(async () => {
      const r = await requireRollout(h.db, id)
      return ['completed', 'failed', 'paused'].includes(r.status) && r
    }, `rollout ${id} to end`, 90_000, 100)

  it('two nodes on 1.7.0 with a transaction each: the anvil-1.7.1 manifest upgrades the canary, then the other; both answer 1.7.1 with their transactions', { timeout: 120_000 }, async () => {
    await allHealthy('both anvil nodes healthy on 1.7.0')
    for (const nodeId of nodes) {
      const receipt = await withChain(nodeId, async (provider) => {
        const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther('2') })
        return minedReceipt(provider, tx.hash)
      })
      if (!receipt) throw new Error('no receipt')
      sent.set(nodeId, receipt)
    }
    // Foundry's 1.7.0 build calls itself 1.6.0 (`anvil --version`: 1.6.0-v1.7.0).
    await expectEveryNode('anvil/v1.6.0')

    const rollout = await createRollout(
      h.db,
      { upgrade_id: 'anvil-1.7.1', chain_profile_id: 'ethereum-anvil', node_type: 'full', source_version: '1.7.0', strategy: 'canary', canary_size: 1, batch_size: 1, health_wait_duration: '2s' },
      { createdBy: operatorId, catalogue: h.setting.deps.chains.current(), now: new Date() },
    )
    expect(rollout).toMatchObject({ upgrade_id: 'anvil-1.7.1', binary_name: 'anvil', target_version: '1.7.1', migration_type: 'non_breaking' })
    await startRollout(h.db, rollout.id, { by: operatorId })
    const done = await ended(rollout.id)
    expect(done, JSON.stringify(await listRolloutNodes(h.db, rollout.id))).toMatchObject({ status: 'completed', succeeded_nodes: 2, failed_nodes: 0 })
    const [canary, rest] = await listRolloutNodes(h.db, rollout.id)
    expect([canary?.batch_index, rest?.batch_index]).toEqual([0, 1])
    // The canary was done before the rest of the fleet began.
    expect(canary?.completed_at?.getTime()).toBeLessThanOrEqual(rest?.started_at?.getTime() ?? 0)
    await expectEveryNode('anvil/v1.7.1')
    await allHealthy('both nodes healthy on 1.7.1')
  })

  it('a deliberately broken artifact fails at start and is rolled back to 1.7.1 on each node, the chain intact', { timeout: 120_000 }, async () => {
    const broken = path.join(tempDir('nodeplane-anvil-broken-'), 'anvil')
    fs.writeFileSync(broken, '#!/bin/sh\necho "anvil: broken build" >&2\nexit 1\n', { mode: 0o755 })
    const rollout = await insertRollout(
      h.db,
      {
        chain_profile_id: 'ethereum-anvil',
        node_type: 'full',
        binary_name: 'anvil',
        source_version: '1.7.1',
        target_version: '9.9.9-broken',
        target_binary_url: pathToFileURL(broken).href,
        target_binary_checksum: `sha256:${crypto.createHash('sha256').update(fs.readFileSync(broken)).digest('hex')}`,
        strategy: 'rolling',
        batch_size: 2,
        canary_size: null,
        failure_threshold: 1,
        health_wait_duration_ms: 1_500,
        created_by: operatorId,
      },
      new Date(),
    )
    await startRollout(h.db, rollout.id, { by: operatorId })
    const done = await ended(rollout.id)
    expect(done.status).not.toBe('completed')
    const rolled = await listRolloutNodes(h.db, rollout.id)
    expect(rolled.map((n) => [n.status, n.upgrade_phase])).toEqual([
      ['failed', 'rolled_back'],
      ['failed', 'rolled_back'],
    ])
    for (const n of rolled) expect(n.error_message).toMatch(/StartNode.*anvil: broken build.*rolled back to version 1\.7\.1/)
    await expectEveryNode('anvil/v1.7.1')
    await allHealthy('both nodes healthy on 1.7.1 again')
  })
})
