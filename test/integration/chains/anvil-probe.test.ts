/**
 * The Ethereum JSON-RPC probe against the real anvil binaries the ethereum-anvil profile ships
 * (npm aliases anvil-<version>, docs/chains.md): what the agent reports for it with each heartbeat.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { createEthereumProbe } from '../../../src/node-agent/probes/ethereum-jsonrpc.js'
import { freePort, waitFor } from '../../helpers/ports.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const anvilBinary = (version: string): string => path.join(repoRoot, 'node_modules', `anvil-${version}`, 'bin', 'anvil')

const stops: (() => Promise<void>)[] = []
afterAll(async () => {
  await Promise.all(stops.map((stop) => stop()))
})

interface RunningAnvil {
  url: string
  rpc(method: string, params?: unknown[]): Promise<unknown>
}

/** anvil as the profile runs it (loopback, interval mining, its state in a directory), stopped after the file. */
async function startAnvil(version: string, blockTimeSeconds: number): Promise<RunningAnvil> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-anvil-probe-'))
  const port = await freePort()
  const child = spawn(anvilBinary(version), ['--host', '127.0.0.1', '--port', String(port), '--block-time', String(blockTimeSeconds), '--state', path.join(dir, 'state.json'), '--quiet'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  stops.push(async () => {
    child.kill('SIGTERM')
    await exited
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const url = `http://127.0.0.1:${port}`
  const rpc = async (method: string, params: unknown[] = []): Promise<unknown> => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
    const body = (await response.json()) as { result?: unknown; error?: { message: string } }
    if (body.error) throw new Error(`${method}: ${body.error.message}`)
    return body.result
  }
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`anvil ${version} exited: ${stderr}`)
    return rpc('eth_chainId').catch(() => undefined)
  }, `anvil ${version} to answer`, 15_000)
  return { url, rpc }
}

describe('the Ethereum JSON-RPC probe against anvil', () => {
  it('reports anvil synced with its advancing height and no peer count (anvil has no net_peerCount)', { timeout: 30_000 }, async () => {
    const anvil = await startAnvil('1.5.1', 0.2)
    await expect(anvil.rpc('net_peerCount')).rejects.toThrow(/Method not found/i)
    const probe = createEthereumProbe({ url: anvil.url, timeout_ms: 5_000 })
    const first = await probe.check()
    expect(first).toMatchObject({ sync_status: 'synced', healthy: true, metrics: { rpc_up: 1 } })
    expect(Object.keys(first.metrics).sort()).toEqual(['block_height', 'rpc_latency_ms', 'rpc_up'])
    const later = await waitFor(async () => {
      const report = await probe.check()
      return (report.metrics.block_height ?? 0) > (first.metrics.block_height ?? 0) && report
    }, 'a later block', 10_000, 100)
    expect(later).toMatchObject({ sync_status: 'synced', healthy: true })
  })

  it('reports anvil stalled when it stops mining, and synced again when blocks come', { timeout: 30_000 }, async () => {
    const anvil = await startAnvil('1.5.1', 0.2)
    const probe = createEthereumProbe({ url: anvil.url, timeout_ms: 5_000 }, { stallChecks: 2, minStallMs: 0 })
    await anvil.rpc('evm_setIntervalMining', [0])
    const reports = [await probe.check(), await probe.check(), await probe.check()]
    expect(reports.map((r) => r.sync_status)).toEqual(['synced', 'synced', 'stalled'])
    expect(reports[2]?.healthy).toBe(true)
    await anvil.rpc('evm_setIntervalMining', [1])
    await anvil.rpc('evm_mine')
    expect(await probe.check()).toMatchObject({ sync_status: 'synced', healthy: true })
  })

  it('each release answers web3_clientVersion with its own version', { timeout: 30_000 }, async () => {
    const [old, current] = await Promise.all([startAnvil('1.5.1', 1), startAnvil('1.7.1', 1)])
    expect(await old.rpc('web3_clientVersion')).toBe('anvil/v1.5.1')
    expect(await current.rpc('web3_clientVersion')).toBe('anvil/v1.7.1')
  })
})
