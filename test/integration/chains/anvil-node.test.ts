/**
 * An ethereum-anvil node on real parts: the repo's chain catalogue, the provision, migrate and
 * rollout workflows, the local provider's agent processes running Foundry's real anvil, and the
 * heartbeat and policy evaluations; transactions sent with ethers. One node per dialect, its
 * tests in order.
 */
import fs from 'node:fs'
import path from 'node:path'
import { Wallet, parseEther, type JsonRpcProvider, type TransactionReceipt } from 'ethers'
import { expect, it } from 'vitest'
import { getProfile } from '../../../src/config/chains.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { runAgentCommand } from '../../../src/provisioning/agent-calls.js'
import { requestMigration, requestProvision, type MigrateResult } from '../../../src/provisioning/index.js'
import { startRollout } from '../../../src/rollouts/control.js'
import { insertRollout, listRolloutNodes, requireRollout } from '../../../src/rollouts/store.js'
import { anvilRpcUrl, DEV_ACCOUNT_KEY, withAnvil } from '../../helpers/anvil.js'
import { useChainHarness } from '../../helpers/chain-harness.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertUser, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { untilRunFinished } from '../provisioning/harness.js'
import { minedReceipt } from '../../helpers/receipts.js'

describeEachDialectConcurrently('an ethereum-anvil node on %s', (dialect) => {
  // Nodes on 1.5.1 (an older default still running in fleets): the release this file is about.
  const h = useChainHarness(dialect, {
    rollouts: true,
    catalogue: (catalogue) => ({ ...catalogue, profiles: new Map([...catalogue.profiles, ['ethereum-anvil', { ...getProfile(catalogue, 'ethereum-anvil'), default_version: '1.5.1' }]]) }),
  })
  let nodeId: string
  const recipient = Wallet.createRandom().address
  const sent: TransactionReceipt[] = []

  /** The node's JSON-RPC URL on its current host. */
  const rpcUrl = async (): Promise<string> => anvilRpcUrl(await h.stateDirOf(nodeId))
  const withChain = async <T>(use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> => withAnvil(await h.stateDirOf(nodeId), use)

  async function sendTransfer(provider: JsonRpcProvider, ether: string): Promise<TransactionReceipt> {
    const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther(ether) })
    const receipt = await minedReceipt(provider, tx.hash)
    expect(receipt.status).toBe(1)
    sent.push(receipt)
    return receipt
  }

  /** Every transaction sent so far is in the chain at its block, and the recipient holds their sum. */
  async function expectChainKept(provider: JsonRpcProvider): Promise<void> {
    for (const receipt of sent) {
      const found = await provider.getTransactionReceipt(receipt.hash)
      expect(found, receipt.hash).toMatchObject({ blockNumber: receipt.blockNumber, blockHash: receipt.blockHash, status: 1 })
    }
    expect(await provider.getBalance(recipient)).toBe(parseEther(String(sent.length * 1.5)))
    expect(await provider.getBlockNumber()).toBeGreaterThanOrEqual(Math.max(...sent.map((r) => r.blockNumber)))
  }

  const healthy = (what: string) => h.untilHealthy(nodeId, what, 30_000)

  it('provisions anvil 1.5.1 until healthy; a transaction sent with ethers is mined', { timeout: 90_000 }, async () => {
    const { node } = await h.newNode('ethereum-anvil')
    nodeId = node.id
    const run = await untilRunFinished(h.db, (await requestProvision(h.db, nodeId)).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    await healthy('the anvil node to be healthy')

    const status = (await h.db('agent_status').where({ node_id: nodeId }).first()) as { binary_version: string }
    expect(status.binary_version).toBe('1.5.1')
    await withChain(async (provider) => {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.5.1')
      expect(await provider.send('eth_syncing', [])).toBe(false)
      const receipt = await sendTransfer(provider, '1.5')
      expect(await provider.getBalance(recipient)).toBe(parseEther('1.5'))
      expect(receipt.blockNumber).toBeGreaterThan(0)
    })
    // The chain lives in the node's data directory.
    expect(fs.existsSync(path.join(await h.stateDirOf(nodeId), 'data', 'state.json'))).toBe(true)
  })

  it('a stop and a start of the chain keep every transaction, including one mined just before the stop', { timeout: 60_000 }, async () => {
    // Mined within the second before the stop: kept by the dump anvil writes on SIGTERM, not the periodic one.
    await withChain((provider) => sendTransfer(provider, '1.5'))
    await runAgentCommand(h.setting.deps, { nodeId, type: 'stop', payload: {}, key: `test-stop-${nodeId}` })
    await expect(rpc(await rpcUrl(), 'eth_blockNumber')).rejects.toThrow()
    await runAgentCommand(h.setting.deps, { nodeId, type: 'start', payload: {}, key: `test-start-${nodeId}` })
    await withChain(expectChainKept)
    await healthy('the node healthy after the restart')
  })

  it('a migration to a new host restores the chain from the old host backup: every block and balance, a transaction mined just before included', { timeout: 90_000 }, async () => {
    const before = String((await findNode(h.db, nodeId))?.host_id)
    // Mined within the second before the move: the migration's backup stops the chain, whose exit
    // writes it (docs/chains.md); a live copy would hold the state of up to a second before.
    await withChain((provider) => sendTransfer(provider, '1.5'))
    await setNodeState(h.db, nodeId, 'down')
    const run = await untilRunFinished(h.db, (await requestMigration(h.db, nodeId, { reason: 'test' })).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: true } } satisfies Partial<MigrateResult>)
    expect(String((await findNode(h.db, nodeId))?.host_id)).not.toBe(before)
    expect(fs.existsSync(path.join(h.setting.root, before))).toBe(false)
    await withChain(expectChainKept)
    await healthy('the migrated node to be healthy')
  })

  it('the host killed: the migration restores the last snapshot (the previous migration backup)', { timeout: 90_000 }, async () => {
    await h.killHost(nodeId)
    await setNodeState(h.db, nodeId, 'down')
    const run = await untilRunFinished(h.db, (await requestMigration(h.db, nodeId, { reason: 'host gone', force: true })).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: false } })
    await withChain(expectChainKept)
    await healthy('the node healthy on its third host')
  })

  it('an in-place upgrade to 1.7.1 cannot read the 1.5.1 chain (anvil changed its state format): rolled back to 1.5.1 with the chain intact', { timeout: 90_000 }, async () => {
    const operatorId = await insertUser(h.db)
    const target = h.setting.deps.chains.current().profiles.get('ethereum-anvil')?.releases.find((r) => r.version === '1.7.1')
    if (!target) throw new Error('the profile has no 1.7.1 release')
    const rollout = await insertRollout(
      h.db,
      {
        chain_profile_id: 'ethereum-anvil',
        node_type: 'full',
        binary_name: 'anvil',
        source_version: '1.5.1',
        target_version: '1.7.1',
        target_binary_url: target.url,
        target_binary_checksum: `sha256:${target.sha256}`,
        strategy: 'rolling',
        batch_size: 1,
        canary_size: null,
        failure_threshold: 0.5,
        health_wait_duration_ms: 1_500,
        created_by: operatorId,
      },
      new Date(),
    )
    await startRollout(h.db, rollout.id, { by: operatorId })
    const done = await waitFor(async () => {
      const r = await requireRollout(h.db, rollout.id)
      return ['completed', 'failed', 'paused'].includes(r.status) && r
    }, 'the rollout to end', 60_000, 100)
    expect(done.status).not.toBe('completed')
    const [node] = await listRolloutNodes(h.db, rollout.id)
    // The agent's StartNode saw 1.7.1 exit at once on the 1.5.1 state file, and compensated.
    expect(node).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back' })
    expect(node?.error_message).toMatch(/^upgrade to 1\.7\.1 failed: upgrade failed at StartNode \(the chain process exited during start \(exit code 2\); last output: error: invalid value .*failed to parse json file.*rolled back to version 1\.5\.1$/)
    await withChain(async (provider) => {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.5.1')
      await expectChainKept(provider)
    })
    await healthy('the node healthy on 1.5.1 again')
  })
})

async function rpc(url: string, method: string): Promise<unknown> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }) })
  const body = (await response.json()) as { result?: unknown }
  return body.result
}
