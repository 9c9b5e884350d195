import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { JsonRpcProvider, Wallet, parseEther, type TransactionReceipt } from 'ethers'
import { describe, expect, it } from 'vitest'
import type { ArtifactView } from '../../src/artifacts/service.js'
import type { RolloutDetailView, RolloutNodeView, RolloutView } from '../../src/rollouts/views.js'
import { DEV_ACCOUNT_KEY, withAnvil } from '../helpers/anvil.js'
import { nodeplane, tempDir } from '../helpers/cli.js'
import { waitFor } from '../helpers/ports.js'
import type { Dialect } from '../helpers/db.js'
import { useJourneyStack, type NodeView } from './chain-journey-stack.js'
import { minedReceipt } from '../helpers/receipts.js'
import { pollEndpoint } from '../helpers/endpoint-poller.js'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

/**
 * The operator's config dir: the repository's catalogue and upgrade manifests as shipped, except
 * that new ethereum-anvil nodes get 1.7.0 rather than the latest release 1.7.1 (so the shipped
 * anvil-1.7.1 manifest has nodes to upgrade), and its anvil releases carry the operator's release
 * signature: with release keys configured, agents install only signed artifacts
 * (docs/artifacts.md). `node_modules` is the repository's, so the profile's relative anvil paths
 * resolve.
 */
async function operatorConfigDir(releaseKey: string): Promise<string> {
  const dir = fs.realpathSync(tempDir('nodeplane-anvil-config-'))
  for (const entry of ['chains', 'upgrades', 'pricing.yaml']) fs.cpSync(path.join(REPO, entry), path.join(dir, entry), { recursive: true })
  fs.symlinkSync(path.join(REPO, 'node_modules'), path.join(dir, 'node_modules'))
  const profile = path.join(dir, 'chains', 'ethereum-anvil', 'profile.yaml')
  let text = fs.readFileSync(profile, 'utf8')
  if (!/^default_version: "1\.7\.1"$/m.test(text)) throw new Error('chains/ethereum-anvil/profile.yaml no longer has default_version "1.7.1"')
  text = text.replace(/^default_version: "1\.7\.1"$/m, 'default_version: "1.7.0"')
  const versions = ['1.5.1', '1.7.0', '1.7.1']
  const signatures = await Promise.all(
    versions.map(async (version) => {
      const signed = await nodeplane(['artifact', 'sign', path.join(REPO, 'node_modules', `anvil-${version}`, 'bin', 'anvil'), '--binary', 'anvil', '--version', version, '--key', releaseKey, '--json'])
      expect(signed.exitCode, signed.stderr).toBe(0)
      return (JSON.parse(signed.stdout) as { signature: string }).signature
    }),
  )
  versions.forEach((version, i) => {
    const line = `    npm_package: anvil-${version}\n`
    if (!text.includes(line)) throw new Error(`chains/ethereum-anvil/profile.yaml has no release ${version} with npm_package anvil-${version}`)
    text = text.replace(line, `${line}    signature: "${signatures[i]}"\n`)
  })
  fs.writeFileSync(profile, text)
  return dir
}

/**
 * The ethereum-anvil journey through the built binary on `nodeplane up`, per database (SQLite:
 * anvil-journey.test.ts, Postgres: anvil-journey-postgres.test.ts, so vitest runs them side by
 * side): `chain list` offers it; two nodes bought with the test card provider come up healthy on
 * Foundry's real anvil 1.7.0; a transfer sent to each with ethers is mined; the shipped upgrade
 * manifest anvil-1.7.1 rolls them to 1.7.1, the canary first, and each answers
 * `web3_clientVersion` anvil/v1.7.1 with its transaction still at its block; a deliberately broken
 * build, stored and signed in the artifact store and named by `rollout create --artifact`, fails to start on each node and is rolled back
 * to 1.7.1 with the chain intact; an operator's migration moves a node with a live backup while
 * a client polls the node's endpoint on the rpc-gateway every 100 ms (it fails only during the
 * move, then the same URL reaches the chain on its new host), and
 * when that node's host is then killed outright the control plane notices, migrates it from the
 * snapshot, and the chain is still there. Tests run in order, each from where the last left off.
 */
export function anvilJourneySuite(dialect: Dialect): void {
  describe(`the ethereum-anvil journey on nodeplane up (${dialect})`, () => {
    let releaseKey = ''
    const s = useJourneyStack(dialect, {
      async env() {
        const keys = tempDir('nodeplane-release-key-')
        releaseKey = path.join(keys, 'release.key')
        const keygen = await nodeplane(['artifact', 'keygen', '--out', releaseKey, '--json'])
        expect(keygen.exitCode, keygen.stderr).toBe(0)
        return { NODEPLANE_CONFIG_DIR: await operatorConfigDir(releaseKey), ARTIFACT_RELEASE_PUBLIC_KEYS: fs.readFileSync(`${releaseKey}.pub`, 'utf8').trim() }
      },
    })
    const nodes: NodeView[] = []
    const recipient = Wallet.createRandom().address
    const sent = new Map<string, TransactionReceipt>()

    const withChain = async <T>(nodeId: string, use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> => withAnvil(await s.stateDir(nodeId), use)

    /** The node's client version, and its transaction at the block it was mined in. */
    async function expectChain(nodeId: string, clientVersion: string): Promise<void> {
      await withChain(nodeId, async (provider) => {
        expect(await provider.send('web3_clientVersion', [])).toBe(clientVersion)
        const receipt = sent.get(nodeId) as TransactionReceipt
        expect(await provider.getTransactionReceipt(receipt.hash)).toMatchObject({ blockNumber: receipt.blockNumber, blockHash: receipt.blockHash, status: 1 })
        expect(await provider.getBalance(recipient)).toBe(parseEther('2'))
      })
    }

    const rolloutNodes = async (id: string): Promise<RolloutNodeView[]> => s.json<{ nodes: RolloutNodeView[] }>(await s.run(['rollout', 'nodes', '--id', id, '--json'])).nodes

    it('chain list offers it; two nodes bought and paid come up healthy on anvil 1.7.0; a transfer sent with ethers is mined on each', { timeout: 120_000 }, async () => {
      const catalogue = s.json<{ chains: Array<{ id: string; versions: string[]; default_version: string }> }>(await s.run(['chain', 'list', '--json']))
      expect(catalogue.chains.find((c) => c.id === 'ethereum-anvil')).toMatchObject({ default_version: '1.7.0', versions: ['1.5.1', '1.7.0', '1.7.1'] })

      const bought = [await s.subscribeAndPay('ethereum-anvil', 'full'), await s.subscribeAndPay('ethereum-anvil', 'full')]
      nodes.push(...(await Promise.all(bought.map((id) => s.untilBought(id, 'ethereum-anvil')))))
      for (const node of nodes) {
        expect(node.binary_version).toBe('1.7.0')
        const receipt = await withChain(node.id, async (provider) => {
          // Foundry's 1.7.0 build calls itself 1.6.0 (docs/chains.md).
          expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.6.0')
          const tx = await new Wallet(DEV_ACCOUNT_KEY, provider).sendTransaction({ to: recipient, value: parseEther('2') })
          return minedReceipt(provider, tx.hash)
        })
        expect(receipt?.status).toBe(1)
        sent.set(node.id, receipt as TransactionReceipt)
        await expectChain(node.id, 'anvil/v1.6.0')
      }
    })

    it('the anvil-1.7.1 manifest rolls the fleet to 1.7.1, the canary first; each answers anvil/v1.7.1 with its transaction', { timeout: 120_000 }, async () => {
      // The manifest moves 1.7.0 only: anvil 1.5 cannot read 1.7's chain state (docs/chains.md).
      const wrongSource = await s.run(['rollout', 'create', '--chain', 'ethereum-anvil', '--node-type', 'full', '--upgrade-id', 'anvil-1.7.1', '--source-version', '1.5.1'])
      expect(wrongSource.exitCode).toBe(2)
      expect(wrongSource.stderr).toContain('body.source_version: upgrade anvil-1.7.1 applies to 1.7.0, not 1.5.1')

      const created = s.json<RolloutView>(
        await s.run(['rollout', 'create', '--chain', 'ethereum-anvil', '--node-type', 'full', '--upgrade-id', 'anvil-1.7.1', '--source-version', '1.7.0', '--strategy', 'canary', '--canary-size', '1', '--batch-size', '1', '--health-wait', '1s', '--json']),
      )
      expect(created).toMatchObject({ status: 'pending', upgrade_id: 'anvil-1.7.1', binary_name: 'anvil', target_version: '1.7.1', strategy: 'canary', canary_size: 1 })
      const started = await s.run(['rollout', 'start', '--id', created.id, '--watch', '--interval', '250ms'])
      expect(started.exitCode, started.stdout + started.stderr).toBe(0)
      expect(started.stdout.trim().split('\n').at(-1)).toBe(`Rollout ${created.id} completed: 2/2 nodes upgraded to 1.7.1.`)

      const [canary, rest] = await rolloutNodes(created.id)
      expect([canary, rest].map((n) => [n?.batch_index, n?.status, n?.previous_version])).toEqual([
        [0, 'succeeded', '1.7.0'],
        [1, 'succeeded', '1.7.0'],
      ])
      // The canary was done before the rest of the fleet began.
      expect(Date.parse(String(canary?.completed_at))).toBeLessThanOrEqual(Date.parse(String(rest?.started_at)))
      for (const node of nodes) {
        await expectChain(node.id, 'anvil/v1.7.1')
        expect(s.json<NodeView>(await s.run(['node', 'show', '--id', node.id, '--json'])).binary_version).toBe('1.7.1')
      }
    })

    it('a broken build, signed in the artifact store, fails to start and is rolled back to 1.7.1 on each node with its chain intact', { timeout: 120_000 }, async () => {
      const broken = path.join(tempDir('nodeplane-anvil-broken-'), 'anvil')
      fs.writeFileSync(broken, '#!/bin/sh\necho "anvil: broken build" >&2\nexit 1\n', { mode: 0o755 })
      const stored = s.json<ArtifactView>(await s.run(['artifact', 'add', broken, '--binary', 'anvil', '--version', '1.7.2', '--key', releaseKey, '--json']))
      expect(stored).toMatchObject({ binary_name: 'anvil', version: '1.7.2', signed: true, sha256: `sha256:${crypto.createHash('sha256').update(fs.readFileSync(broken)).digest('hex')}` })

      // Named by binary and version: no URL; the command pins the stored digest, the agents fetch the store's bytes.
      const created = s.json<RolloutView>(
        await s.run(['rollout', 'create', '--chain', 'ethereum-anvil', '--node-type', 'full', '--source-version', '1.7.1', '--artifact', 'anvil@1.7.2', '--strategy', 'all_at_once', '--failure-threshold', '1', '--health-wait', '1s', '--json']),
      )
      expect(created).toMatchObject({ binary_name: 'anvil', target_version: '1.7.2', target_binary_checksum: stored.sha256 })
      const started = await s.run(['rollout', 'start', '--id', created.id, '--watch', '--interval', '250ms'])
      // Exit 1: the rollout ended failed.
      expect(started.exitCode, started.stdout + started.stderr).toBe(1)
      const status = s.json<RolloutDetailView>(await s.run(['rollout', 'status', '--id', created.id, '--json']))
      expect(status).toMatchObject({ status: 'failed', succeeded_nodes: 0, failed_nodes: 2 })

      const rolled = await rolloutNodes(created.id)
      expect(rolled.map((n) => [n.status, n.upgrade_phase])).toEqual([
        ['failed', 'rolled_back'],
        ['failed', 'rolled_back'],
      ])
      // The agents verified the release signature and installed the build: it failed at its start.
      for (const n of rolled) expect(n.error_message).toMatch(/StartNode.*anvil: broken build.*rolled back to version 1\.7\.1/)
      for (const node of nodes) {
        await s.untilHealthy(node.id, 'the node healthy on 1.7.1 again')
        await expectChain(node.id, 'anvil/v1.7.1')
      }
    })

    let migrationRun = ''
    let firstHost = ''

    it('an operator migration moves a node with a live backup while a client polls its endpoint: it fails only in the move, then the same URL reaches the chain on the new host', { timeout: 120_000 }, async () => {
      const node = nodes[0] as NodeView
      firstHost = await s.hostId(node.id)
      // The customer's client: the node's endpoint (key in the URL), eth_blockNumber every 100 ms, before, during and after the move.
      const rpcKey = s.json<{ key: string }>(await s.run(['api-key', 'create', '--name', 'poller', '--scopes', 'nodes:rpc', '--json'])).key
      const endpoint = `${s.json<{ endpoints: { http: string } }>(await s.run(['node', 'show', '--id', node.id, '--json'])).endpoints.http}/${rpcKey}`
      const poller = pollEndpoint(endpoint, 'eth_blockNumber')
      let migrationAsked = 0
      let migrationDone = 0
      try {
        await waitFor(async () => poller.answers.filter((a) => a.status === 200).length >= 3, 'the client answered before the move', 10_000, 25)
        migrationAsked = Date.now()
        const migrate = s.json<{ run_id: string; created: boolean }>(await s.run(['node', 'migrate', '--node', node.id, '--reason', 'e2e: move it', '--json']))
        expect(migrate.created).toBe(true)
        migrationRun = migrate.run_id
        const moved = await s.untilRun(migrate.run_id)
        expect(moved).toMatchObject({ status: 'completed', result: { outcome: 'migrated', restored: true, backup: { taken: true } } })
        expect(await s.hostId(node.id)).not.toBe(firstHost)
        await s.untilHealthy(node.id, 'the migrated node healthy')
        migrationDone = Date.now()
        await waitFor(async () => poller.answers.filter((a) => a.sentAt > migrationDone && a.status === 200).length >= 3, 'the client answered after the move', 10_000, 25)
      } finally {
        await poller.stop()
      }
      const answers = poller.answers
      const failed = answers.filter((a) => a.status !== 200)
      // It saw the move (the node was in maintenance for it), and only in the move: every failure
      // between the command and the node healthy again, in one run, each a JSON-RPC error saying why.
      expect(failed.length).toBeGreaterThan(0)
      for (const a of failed) {
        expect(a.sentAt).toBeGreaterThanOrEqual(migrationAsked)
        expect(a.sentAt).toBeLessThan(migrationDone)
        expect([502, 503, 504]).toContain(a.status)
        expect(a.error?.code, JSON.stringify(a)).toBeOneOf([-32010, -32011])
      }
      const firstFailure = answers.indexOf(failed[0] as (typeof answers)[number])
      const lastFailure = answers.indexOf(failed.at(-1) as (typeof answers)[number])
      expect(answers.slice(firstFailure, lastFailure + 1).filter((a) => a.status === 200).length, 'answers inside the window').toBe(0)
      // The same chain, moved with its state: block numbers never go back.
      const heights = answers.filter((a) => a.status === 200).map((a) => Number(a.result))
      expect(heights).toEqual([...heights].sort((a, b) => a - b))
      // The same URL now reaches the chain on the new host: a transaction sent through it is on that host's chain.
      const client = new JsonRpcProvider(endpoint, undefined, { staticNetwork: true })
      try {
        const tx = await new Wallet(DEV_ACCOUNT_KEY, client).sendTransaction({ to: Wallet.createRandom().address, value: parseEther('1') })
        await minedReceipt(client, tx.hash)
        await withChain(node.id, async (provider) => expect((await provider.getTransactionReceipt(tx.hash))?.status).toBe(1))
      } finally {
        client.destroy()
      }
      await expectChain(node.id, 'anvil/v1.7.1')
    })

    it('its host then killed, the node is migrated from the snapshot of that move by itself with the chain intact', { timeout: 120_000 }, async () => {
      const node = nodes[0] as NodeView
      // The host dies: no backup can be taken now; the control plane notices the silence,
      // marks the node down and migrates it from the snapshot of the move above.
      const secondHost = await s.hostId(node.id)
      await s.killHost(node.id)
      const healed = await s.untilNextMigration(node.id, [migrationRun])
      expect(healed).toMatchObject({ status: 'completed', result: { outcome: 'migrated', restored: true, backup: { taken: false } } })
      const thirdHost = await s.hostId(node.id)
      expect([firstHost, secondHost]).not.toContain(thirdHost)
      await s.untilHealthy(node.id, 'the node healthy on its third host')
      await expectChain(node.id, 'anvil/v1.7.1')
    })
  })
}
