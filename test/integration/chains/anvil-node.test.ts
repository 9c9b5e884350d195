/**
 * An ethereum-anvil node on real parts: the repo's chain catalogue, the provision, migrate and
 * rollout workflows, the local provider's agent processes running Foundry's real anvil, and the
 * heartbeat and policy evaluations; transactions sent with ethers. One node per dialect, its
 * tests in order.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { JsonRpcProvider, Wallet, parseEther, type TransactionReceipt } from 'ethers'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { evaluatePolicies } from '../../../src/health/policy-evaluation.js'
import { createLogger } from '../../../src/log.js'
import { findNode, insertNode } from '../../../src/nodes/node-store.js'
import { runAgentCommand } from '../../../src/provisioning/agent-calls.js'
import { requestMigration, requestProvision, type MigrateResult } from '../../../src/provisioning/index.js'
import { startRollout } from '../../../src/rollouts/control.js'
import { insertRollout, listRolloutNodes, requireRollout } from '../../../src/rollouts/store.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertUser, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished, type LifecycleSetting } from '../provisioning/harness.js'

const logger = createLogger({ level: 'silent' })
/** The first of anvil's ten development accounts (its well-known test mnemonic), funded at genesis. */
const DEV_ACCOUNT_KEY = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80'

describeEachDialectConcurrently('an ethereum-anvil node on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let setting: LifecycleSetting
  let worker: WorkflowWorker
  let evaluator: NodeJS.Timeout
  let evaluating = Promise.resolve()
  let nodeId: string
  const recipient = Wallet.createRandom().address
  const sent: TransactionReceipt[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    setting = await lifecycleSetting(db, { logger, heartbeatIntervalSeconds: 1 })
    worker = startLifecycleWorker(db, setting.deps, 4, { rollouts: true })
    // The health-evaluator's two evaluations, as its cycle runs them: syncing -> healthy, and
    // application health by the profile's policy.
    evaluator = setInterval(() => {
      evaluating = evaluating
        .then(async () => {
          const now = new Date()
          await evaluateHeartbeats(db, { now, heartbeatTimeoutMs: 60_000, intervalMs: 1_000, logger })
          await evaluatePolicies(db, { now, catalogue: setting.deps.chains.current(), reportMaxAgeMs: 60_000, logger })
        })
        .catch(() => undefined)
    }, 300)
  })
  afterAll(async () => {
    clearInterval(evaluator)
    await evaluating
    await worker?.stop()
    if (setting) {
      await Promise.all(fs.readdirSync(setting.root).map((host) => setting.provider.destroyHost(host)))
      await setting.gateway.stop()
      fs.rmSync(setting.root, { recursive: true, force: true })
      fs.rmSync(setting.store, { recursive: true, force: true })
    }
    await t?.destroy()
  })

  /** The node's JSON-RPC URL on its current host: the port the profile's run.args gave anvil. */
  async function rpcUrl(): Promise<string> {
    const hostId = String((await findNode(db, nodeId))?.host_id)
    const active = JSON.parse(fs.readFileSync(path.join(setting.root, hostId, 'state', 'active.json'), 'utf8')) as { run: { args: string[] } }
    const port = active.run.args[active.run.args.indexOf('--port') + 1]
    return `http://127.0.0.1:${port}`
  }

  async function withChain<T>(use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> {
    const url = await rpcUrl()
    // A start succeeds once anvil stayed up through the settle period, not once it listens.
    await waitFor(() => rpc(url, 'eth_blockNumber').catch(() => undefined), 'anvil to answer', 15_000, 100)
    const provider = new JsonRpcProvider(url, undefined, { staticNetwork: true, pollingInterval: 100 })
    try {
      return await use(provider)
    } finally {
      provider.destroy()
    }
  }

  async function sendTransfer(provider: JsonRpcProvider, ether: string): Promise<TransactionReceipt> {
    const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther(ether) })
    const receipt = await tx.wait(1, 15_000)
    if (!receipt) throw new Error('no receipt')
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

  const healthy = async (what: string) => {
    let seen = ''
    try {
      return await waitFor(async () => {
        const node = await findNode(db, nodeId)
        seen = `${node?.state}, ${node?.sync_status}, ${node?.application_health}`
        return node?.state === 'healthy' && node.sync_status === 'synced' && node.application_health === 'ok' && node
      }, what, 30_000, 100)
    } catch (err) {
      const report = (await db('agent_status').where({ node_id: nodeId }).first()) as unknown
      throw new Error(`${(err as Error).message}; last seen (state, sync, application health): ${seen}; agent report ${JSON.stringify(report)}`)
    }
  }

  it('provisions anvil 1.5.1 until healthy; a transaction sent with ethers is mined', { timeout: 90_000 }, async () => {
    const userId = await insertUser(db)
    const subscriptionId = crypto.randomUUID()
    const now = new Date()
    await db('subscriptions').insert({
      id: subscriptionId,
      user_id: userId,
      chain_profile_id: 'ethereum-anvil',
      node_type: 'full',
      duration: '1m',
      provider: 'local',
      region: 'local',
      instance_type: 'local.small',
      status: 'active',
      expires_at: new Date(now.getTime() + 30 * 86_400_000),
      created_at: now,
      updated_at: now,
    })
    const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'ethereum-anvil', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })
    nodeId = node.id
    const run = await untilRunFinished(db, (await requestProvision(db, nodeId)).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    await healthy('the anvil node to be healthy')

    const status = (await db('agent_status').where({ node_id: nodeId }).first()) as { binary_version: string }
    expect(status.binary_version).toBe('1.5.1')
    await withChain(async (provider) => {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.5.1')
      expect(await provider.send('eth_syncing', [])).toBe(false)
      const receipt = await sendTransfer(provider, '1.5')
      expect(await provider.getBalance(recipient)).toBe(parseEther('1.5'))
      expect(receipt.blockNumber).toBeGreaterThan(0)
    })
    // The chain lives in the node's data directory.
    const hostId = String((await findNode(db, nodeId))?.host_id)
    expect(fs.existsSync(path.join(setting.root, hostId, 'state', 'data', 'state.json'))).toBe(true)
  })

  it('a stop and a start of the chain keep every transaction, including one mined just before the stop', { timeout: 60_000 }, async () => {
    // Mined within the second before the stop: kept by the dump anvil writes on SIGTERM, not the periodic one.
    await withChain((provider) => sendTransfer(provider, '1.5'))
    await runAgentCommand(setting.deps, { nodeId, type: 'stop', payload: {}, key: `test-stop-${nodeId}` })
    await expect(rpc(await rpcUrl(), 'eth_blockNumber')).rejects.toThrow()
    await runAgentCommand(setting.deps, { nodeId, type: 'start', payload: {}, key: `test-start-${nodeId}` })
    await withChain(expectChainKept)
    await healthy('the node healthy after the restart')
  })

  it('a migration to a new host restores the chain from the old host backup: every block and balance', { timeout: 90_000 }, async () => {
    const before = String((await findNode(db, nodeId))?.host_id)
    const latest = await withChain((provider) => sendTransfer(provider, '1.5'))
    // A live backup holds the chain as of anvil's last dump, at most state_interval (1 s) old
    // (docs/chains.md): wait for the dump that holds the latest transaction.
    const dump = path.join(setting.root, before, 'state', 'data', 'state.json')
    await waitFor(async () => fs.readFileSync(dump, 'utf8').includes(latest.hash.toLowerCase()), 'the periodic dump to hold the transaction', 10_000, 100)
    await setNodeState(db, nodeId, 'down')
    const run = await untilRunFinished(db, (await requestMigration(db, nodeId, { reason: 'test' })).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: true } } satisfies Partial<MigrateResult>)
    expect(String((await findNode(db, nodeId))?.host_id)).not.toBe(before)
    expect(fs.existsSync(path.join(setting.root, before))).toBe(false)
    await withChain(expectChainKept)
    await healthy('the migrated node to be healthy')
  })

  it('the host killed: the migration restores the last snapshot (the previous migration backup)', { timeout: 90_000 }, async () => {
    const hostId = String((await findNode(db, nodeId))?.host_id)
    const { pid } = JSON.parse(fs.readFileSync(path.join(setting.root, hostId, 'host.json'), 'utf8')) as { pid: number }
    process.kill(-pid, 'SIGKILL')
    await setNodeState(db, nodeId, 'down')
    const run = await untilRunFinished(db, (await requestMigration(db, nodeId, { reason: 'host gone', force: true })).run.id)
    expect(run.status, run.error ?? '').toBe('completed')
    expect(run.result).toMatchObject({ outcome: 'migrated', restored: true, backup: { taken: false } })
    await withChain(expectChainKept)
    await healthy('the node healthy on its third host')
  })

  it('an in-place upgrade to 1.7.1 cannot read the 1.5.1 chain (anvil changed its state format): rolled back to 1.5.1 with the chain intact', { timeout: 90_000 }, async () => {
    const operatorId = await insertUser(db)
    const target = setting.deps.chains.current().profiles.get('ethereum-anvil')?.releases.find((r) => r.version === '1.7.1')
    if (!target) throw new Error('the profile has no 1.7.1 release')
    const rollout = await insertRollout(
      db,
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
    await startRollout(db, rollout.id, { by: operatorId })
    const done = await waitFor(async () => {
      const r = await requireRollout(db, rollout.id)
      return ['completed', 'failed', 'paused'].includes(r.status) && r
    }, 'the rollout to end', 60_000, 100)
    expect(done.status).not.toBe('completed')
    const [node] = await listRolloutNodes(db, rollout.id)
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
