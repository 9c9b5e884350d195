import fs from 'node:fs'
import path from 'node:path'
import { JsonRpcProvider, Wallet, parseEther } from 'ethers'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { waitFor } from '../helpers/ports.js'

/**
 * The README's anvil example through the binary: `nodeplane up` offers ethereum-anvil in `chain
 * list`; a subscription bought with the test card provider gets a node running the real anvil,
 * healthy, and a transaction sent to it with ethers is mined. (`up` runs on SQLite; the same
 * lifecycle on Postgres: test/integration/chains/anvil-node.test.ts.)
 */
describe('an ethereum-anvil node bought on nodeplane up', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>

  const run = (args: string[]): Promise<CliResult> => nodeplane(args, { cwd: dir })
  const json = <T>(result: CliResult): T => {
    expect(result.exitCode, result.stderr).toBe(0)
    return JSON.parse(result.stdout) as T
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), AGENT_HEARTBEAT_INTERVAL: '1s', HEALTH_EVALUATION_INTERVAL: '1s' } })
    await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json', 60_000)
  })

  afterAll(async () => {
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    // Local hosts outlive `up` (README): stop each one's agent, which stops its anvil.
    const hosts = dir ? path.join(dir, '.nodeplane', 'hosts') : undefined
    for (const host of hosts && fs.existsSync(hosts) ? fs.readdirSync(hosts) : []) {
      const { pid } = JSON.parse(fs.readFileSync(path.join(hosts as string, host, 'host.json'), 'utf8')) as { pid: number }
      try {
        process.kill(-pid, 'SIGTERM')
      } catch {
        // already gone
      }
      await waitFor(async () => {
        try {
          process.kill(-pid, 0)
          return false
        } catch {
          return true
        }
      }, `host ${host} to stop`, 20_000, 100)
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('chain list offers it; subscribe, pay, healthy on anvil 1.5.1; a transaction is mined', { timeout: 180_000 }, async () => {
    const catalogue = json<{ chains: Array<{ id: string; versions: string[]; default_version: string }> }>(await run(['chain', 'list', '--json']))
    expect(catalogue.chains.find((c) => c.id === 'ethereum-anvil')).toMatchObject({ default_version: '1.5.1', versions: ['1.5.1', '1.7.0', '1.7.1'] })

    const subscription = json<{ id: string }>(await run(['subscription', 'create', '--chain', 'ethereum-anvil', '--node-type', 'full', '--duration', '1w', '--json']))
    json(await run(['payment', 'create', '--subscription', subscription.id, '--method', 'card', '--wait', '--json']))
    interface NodeView {
      id: string
      subscription_id: string
      state: string
      application_health: string
      binary_version: string | null
    }
    const node = await waitFor(async () => {
      const result = await run(['node', 'list', '--json'])
      if (result.exitCode !== 0) return undefined
      const found = (JSON.parse(result.stdout) as { nodes: NodeView[] }).nodes.find((n) => n.subscription_id === subscription.id)
      if (found?.state === 'failed') throw new Error('the node failed')
      return found?.state === 'healthy' && found.application_health === 'ok' && found
    }, 'node list: the anvil node healthy with application health ok', 120_000, 500)
    expect(node.binary_version).toBe('1.5.1')

    const active = JSON.parse(fs.readFileSync(path.join(dir, '.nodeplane', 'hosts', `local-${node.id}`, 'state', 'active.json'), 'utf8')) as { run: { args: string[] } }
    const provider = new JsonRpcProvider(`http://127.0.0.1:${active.run.args[active.run.args.indexOf('--port') + 1]}`, undefined, { staticNetwork: true, pollingInterval: 100 })
    try {
      expect(await provider.send('web3_clientVersion', [])).toBe('anvil/v1.5.1')
      const recipient = Wallet.createRandom().address
      const tx = await new Wallet('0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80', provider).sendTransaction({ to: recipient, value: parseEther('1') })
      expect((await tx.wait(1, 15_000))?.status).toBe(1)
      expect(await provider.getBalance(recipient)).toBe(parseEther('1'))
    } finally {
      provider.destroy()
    }
  })
})
