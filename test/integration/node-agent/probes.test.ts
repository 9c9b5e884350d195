import { execFile, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import ganache, { type EthereumProvider, type Server as GanacheServer } from 'ganache'
import { afterEach, describe, expect, it } from 'vitest'
import { probeSpec } from '../../../src/agent-gateway/protocol.js'
import { createCommandProbe } from '../../../src/node-agent/probes/command.js'
import { createEthereumProbe } from '../../../src/node-agent/probes/ethereum-jsonrpc.js'
import { createProbe } from '../../../src/node-agent/probes/index.js'
import type { Probe, ProbeReport } from '../../../src/node-agent/probes/types.js'
import { freePort, waitFor } from '../../helpers/ports.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const releaseOf = (version: string) => path.join(repoRoot, 'chains/devnet/releases', `devnet-node-${version}.mjs`)

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-probes-'))
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function checks(probe: Probe, count: number): Promise<ProbeReport[]> {
  const reports: ProbeReport[] = []
  for (let i = 0; i < count; i++) reports.push(await probe.check())
  return reports
}

interface RpcAnswer {
  result?: unknown
  error?: { code: number; message: string }
}

async function rpc(url: string, method: string): Promise<RpcAnswer> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 7, method, params: [] }) })
  return (await response.json()) as RpcAnswer
}

async function startGanache(): Promise<{ server: GanacheServer; url: string; stop: () => Promise<void> }> {
  const server = ganache.server({ logging: { quiet: true } })
  const port = await freePort()
  await server.listen(port, '127.0.0.1')
  let stopped = false
  const stop = async () => {
    if (stopped) return
    stopped = true
    await server.close()
  }
  cleanups.push(stop)
  return { server, url: `http://127.0.0.1:${port}`, stop }
}

async function mine(server: GanacheServer, blocks: number): Promise<void> {
  for (let i = 0; i < blocks; i++) await server.provider.request({ method: 'evm_mine', params: [] })
}

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  )
  const address = server.address()
  if (typeof address !== 'object' || address === null) throw new Error('no address')
  return `http://127.0.0.1:${address.port}`
}

/**
 * A JSON-RPC front for a ganache provider the way some hosted endpoints behave: it may refuse
 * batch requests and may require Basic credentials. Counts the HTTP requests it receives.
 */
async function startGateway(provider: EthereumProvider, options: { batches: boolean; credentials?: string }) {
  const seen = { batch: 0, single: 0, unauthorized: 0 }
  const answer = async (request: { id?: unknown; method: string; params?: unknown[] }) => {
    try {
      const result = await provider.request({ method: request.method, params: request.params ?? [] } as Parameters<EthereumProvider['request']>[0])
      return { jsonrpc: '2.0', id: request.id, result }
    } catch (err) {
      return { jsonrpc: '2.0', id: request.id, error: { code: -32601, message: (err as Error).message } }
    }
  }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      void (async () => {
        if (options.credentials && req.headers.authorization !== `Basic ${Buffer.from(options.credentials).toString('base64')}`) {
          seen.unauthorized += 1
          res.writeHead(401).end('unauthorized')
          return
        }
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown
        let reply: unknown
        if (Array.isArray(body)) {
          seen.batch += 1
          reply = options.batches
            ? await Promise.all(body.map((r) => answer(r as { method: string })))
            : { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'batch requests are not supported' } }
        } else {
          seen.single += 1
          reply = await answer(body as { method: string })
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply))
      })()
    })
  })
  return { url: await listen(server), seen }
}

interface Devnet {
  child: ChildProcess
  url: string
  dataDir: string
  exit: Promise<number | null>
  output(): string
  stop(): Promise<number | null>
}

async function startDevnet(version: string, config: Record<string, unknown>, dataDir = path.join(tempDir(), 'data'), options: { waitForRpc?: boolean } = {}): Promise<Devnet> {
  const port = typeof config.rpc_port === 'number' ? config.rpc_port : await freePort()
  const configFile = path.join(tempDir(), 'devnet.json')
  fs.writeFileSync(configFile, JSON.stringify({ rpc_port: port, block_time_ms: 50, ...config }))
  const child = spawn(process.execPath, [releaseOf(version), '--config', configFile, '--data-dir', dataDir], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    return exit
  }
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exit
  })
  const url = `http://127.0.0.1:${port}`
  if (options.waitForRpc !== false) await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`devnet-node exited with ${child.exitCode}: ${output}`)
      return (await rpc(url, 'eth_blockNumber')).result !== undefined
    },
    `devnet-node ${version} to answer`,
    10_000,
  )
  return { child, url, dataDir, exit, output: () => output, stop }
}

function heightIn(dataDir: string): number {
  return (JSON.parse(fs.readFileSync(path.join(dataDir, 'chain.json'), 'utf8')) as { height: number }).height
}

describe('the Ethereum JSON-RPC probe against ganache', () => {
  it('reports a synced chain with its height, peers and latency, and sees mined blocks', async () => {
    const { server, url } = await startGanache()
    const probe = createEthereumProbe({ url, timeout_ms: 2_000 })
    const first = await probe.check()
    expect(first).toMatchObject({ sync_status: 'synced', healthy: true, metrics: { block_height: 0, peer_count: 0, rpc_up: 1 } })
    expect(first.metrics.rpc_latency_ms).toBeGreaterThanOrEqual(0)
    expect(first.metrics).not.toHaveProperty('highest_block')
    expect(first.error).toBeUndefined()
    await mine(server, 2)
    expect((await probe.check()).metrics.block_height).toBe(2)
  })

  it('marks a chain stalled after the configured number of checks without a new block, and clears it when a block comes', async () => {
    const { server, url } = await startGanache()
    const probe = createEthereumProbe({ url, timeout_ms: 2_000 }, { stallChecks: 3, minStallMs: 0 })
    const reports = await checks(probe, 4)
    expect(reports.map((r) => r.sync_status)).toEqual(['synced', 'synced', 'synced', 'stalled'])
    expect(reports[3]?.healthy).toBe(true)
    expect((await probe.check()).sync_status).toBe('stalled')
    await mine(server, 1)
    expect(await probe.check()).toMatchObject({ sync_status: 'synced', metrics: { block_height: 1 } })
    // The count starts again from the new block.
    expect((await checks(probe, 3)).map((r) => r.sync_status)).toEqual(['synced', 'synced', 'stalled'])
  })

  it('uses the spec default of 5 checks without progress, and 30 s at least without a new block', async () => {
    const { url } = await startGanache()
    let now = 1_000_000
    const probe = createEthereumProbe({ url, timeout_ms: 2_000 }, { clock: () => now })
    // Quick checks (an agent reporting a command's progress) within one block time: no stall.
    expect((await checks(probe, 8)).map((r) => r.sync_status)).toEqual(Array(8).fill('synced'))
    now += 29_000
    expect((await probe.check()).sync_status).toBe('synced')
    now += 1_000
    expect((await probe.check()).sync_status).toBe('stalled')
    // Checks 20 s apart: fewer than 5 without progress is no stall however long it took.
    const slow = createEthereumProbe({ url, timeout_ms: 2_000 }, { clock: () => now })
    const statuses: string[] = []
    for (let i = 0; i < 6; i++) {
      statuses.push((await slow.check()).sync_status)
      now += 20_000
    }
    expect(statuses).toEqual(['synced', 'synced', 'synced', 'synced', 'synced', 'stalled'])
  })

  it('reports an unreachable endpoint as unknown and unhealthy, without the URL in the error', async () => {
    const { url, stop } = await startGanache()
    const probe = createEthereumProbe({ url, timeout_ms: 2_000 })
    expect((await probe.check()).metrics.rpc_up).toBe(1)
    await stop()
    // The first request may still go out on the kept-alive connection the server just closed.
    expect(await probe.check()).toMatchObject({ sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 } })
    const down = { sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error: 'cannot reach the JSON-RPC endpoint (ECONNREFUSED)' }
    expect(await probe.check()).toEqual(down)
    expect(await createEthereumProbe({ url: `${url}/v3/secret-api-key`, timeout_ms: 2_000 }).check()).toEqual(down)
  })

  it('falls back to single calls for an endpoint that refuses batches, and remembers it', async () => {
    const provider = ganache.provider({ logging: { quiet: true } })
    cleanups.push(() => provider.disconnect())
    const gateway = await startGateway(provider, { batches: false })
    const probe = createEthereumProbe({ url: gateway.url, timeout_ms: 2_000 })
    expect(await probe.check()).toMatchObject({ sync_status: 'synced', healthy: true, metrics: { block_height: 0, rpc_up: 1 } })
    expect(gateway.seen).toEqual({ batch: 1, single: 3, unauthorized: 0 })
    await provider.request({ method: 'evm_mine', params: [] })
    expect((await probe.check()).metrics.block_height).toBe(1)
    expect(gateway.seen).toEqual({ batch: 1, single: 6, unauthorized: 0 })
  })

  it('sends credentials in the URL as Basic authorization and reports a refusal without them', async () => {
    const provider = ganache.provider({ logging: { quiet: true } })
    cleanups.push(() => provider.disconnect())
    const gateway = await startGateway(provider, { batches: true, credentials: 'probe:s3cret' })
    const withCredentials = createEthereumProbe({ url: gateway.url.replace('http://', 'http://probe:s3cret@'), timeout_ms: 2_000 })
    expect(await withCredentials.check()).toMatchObject({ healthy: true, metrics: { rpc_up: 1 } })
    expect(gateway.seen).toMatchObject({ batch: 1, single: 0, unauthorized: 0 })

    const wrong = await createEthereumProbe({ url: gateway.url.replace('http://', 'http://probe:wrong@'), timeout_ms: 2_000 }).check()
    expect(wrong).toMatchObject({ sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error: 'the endpoint answered HTTP 401' })
    expect(wrong.error).not.toContain('wrong')
  })

  it('gives up after timeout_ms on an endpoint that never answers', async () => {
    const silent = http.createServer(() => {})
    const url = await listen(silent)
    const started = Date.now()
    const report = await createEthereumProbe({ url, timeout_ms: 300 }).check()
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(report).toEqual({ sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error: 'no answer within 300 ms' })
  })

  // Not -32601 (method not found): a client without net_peerCount is reported without peer_count (anvil-probe.test.ts).
  it('reports a JSON-RPC error as unknown, naming the method', async () => {
    const server = http.createServer((req, res) => {
      req.resume()
      req.on('end', () => {
        const reply = [0, 1, 2].map((id) =>
          id === 2 ? { jsonrpc: '2.0', id, error: { code: -32000, message: 'net_peerCount is disabled' } } : { jsonrpc: '2.0', id, result: id === 0 ? false : '0x10' },
        )
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply))
      })
    })
    const report = await createEthereumProbe({ url: await listen(server), timeout_ms: 2_000 }).check()
    expect(report).toEqual({ sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 }, error: 'net_peerCount: JSON-RPC error -32000: net_peerCount is disabled' })
  })
})

describe('devnet-node', () => {
  it('answers JSON-RPC 2.0: single and batch requests, unknown methods, bad JSON', async () => {
    const node = await startDevnet('1.0.0', { peers: 7, chain_id: 4242 })
    expect((await rpc(node.url, 'eth_chainId')).result).toBe('0x1092')
    expect((await rpc(node.url, 'net_version')).result).toBe('4242')
    expect((await rpc(node.url, 'net_peerCount')).result).toBe('0x7')
    expect((await rpc(node.url, 'eth_mine')).error?.code).toBe(-32601)
    const bad = await fetch(node.url, { method: 'POST', body: '{"jsonrpc":' })
    expect(((await bad.json()) as RpcAnswer).error?.code).toBe(-32700)
    const batch = await fetch(node.url, {
      method: 'POST',
      body: JSON.stringify([
        { jsonrpc: '2.0', id: 'a', method: 'web3_clientVersion' },
        { jsonrpc: '2.0', method: 'eth_blockNumber' },
        { jsonrpc: '2.0', id: 'b', method: 'nope' },
      ]),
    })
    const answers = (await batch.json()) as { id: string; result?: unknown; error?: { code: number } }[]
    expect(answers).toEqual([
      { jsonrpc: '2.0', id: 'a', result: 'devnet-node/v1.0.0' },
      { jsonrpc: '2.0', id: 'b', error: { code: -32601, message: 'the method nope does not exist/is not available' } },
    ])
    expect(await node.stop()).toBe(0)
    expect(node.output()).toMatch(/JSON-RPC listening on 127\.0\.0\.1:\d+/)
  })

  it('differs between 1.0.0 and 1.1.0: the client version and eth_gasPrice', async () => {
    const [old, current] = await Promise.all([startDevnet('1.0.0', {}), startDevnet('1.1.0', {})])
    expect((await rpc(old.url, 'web3_clientVersion')).result).toBe('devnet-node/v1.0.0')
    expect((await rpc(current.url, 'web3_clientVersion')).result).toBe('devnet-node/v1.1.0')
    expect((await rpc(old.url, 'eth_gasPrice')).error?.code).toBe(-32601)
    expect((await rpc(current.url, 'eth_gasPrice')).result).toBe('0x3b9aca00')
    const run = promisify(execFile)
    expect((await run(process.execPath, [releaseOf('1.0.0'), '--version'])).stdout).toBe('1.0.0\n')
    expect((await run(process.execPath, [releaseOf('1.1.0'), '--version'])).stdout).toBe('1.1.0\n')
  })

  it('is reported synced, or syncing with the highest block during its simulated initial sync', async () => {
    const synced = await startDevnet('1.0.0', { sync_blocks: 0 })
    expect(await createEthereumProbe({ url: synced.url, timeout_ms: 2_000 }).check()).toMatchObject({ sync_status: 'synced', healthy: true })

    const syncing = await startDevnet('1.0.0', { sync_blocks: 100_000 })
    const report = await createEthereumProbe({ url: syncing.url, timeout_ms: 2_000 }).check()
    expect(report).toMatchObject({ sync_status: 'syncing', healthy: true, metrics: { highest_block: 100_000, peer_count: 3, rpc_up: 1 } })
    expect(report.metrics.block_height).toBeLessThan(100_000)

    const catchingUp = await startDevnet('1.0.0', { sync_blocks: 4, block_time_ms: 20 })
    const probe = createEthereumProbe({ url: catchingUp.url, timeout_ms: 2_000 })
    const done = await waitFor(async () => {
      const r = await probe.check()
      return r.sync_status === 'synced' && r
    }, 'devnet-node to finish its initial sync')
    expect(done.metrics.block_height).toBeGreaterThanOrEqual(4)
    expect(done.metrics).not.toHaveProperty('highest_block')
  })

  it('is reported stalled when it stops producing blocks, syncing or synced, until blocks come again', async () => {
    const halted = await startDevnet('1.0.0', { halt_blocks: true })
    const probe = createEthereumProbe({ url: halted.url, timeout_ms: 2_000 }, { stallChecks: 3, minStallMs: 0 })
    expect((await checks(probe, 4)).map((r) => r.sync_status)).toEqual(['synced', 'synced', 'synced', 'stalled'])

    // While the node is down the probe knows nothing, and the stall is not forgotten.
    expect(await halted.stop()).toBe(0)
    expect(await probe.check()).toMatchObject({ sync_status: 'unknown', healthy: false, metrics: { rpc_up: 0 } })
    const haltedAgain = await startDevnet('1.0.0', { halt_blocks: true, rpc_port: Number(new URL(halted.url).port) }, halted.dataDir)
    expect((await probe.check()).sync_status).toBe('stalled')

    await haltedAgain.stop()
    await startDevnet('1.0.0', { block_time_ms: 20, rpc_port: Number(new URL(halted.url).port) }, halted.dataDir)
    await waitFor(async () => (await probe.check()).sync_status === 'synced', 'the stall to clear once blocks come')

    const haltedWhileSyncing = await startDevnet('1.0.0', { halt_blocks: true, sync_blocks: 10 })
    const syncingProbe = createEthereumProbe({ url: haltedWhileSyncing.url, timeout_ms: 2_000 }, { stallChecks: 2, minStallMs: 0 })
    expect((await checks(syncingProbe, 3)).map((r) => r.sync_status)).toEqual(['syncing', 'syncing', 'stalled'])
  })

  it('keeps its height and node key across a restart and an upgrade, and creates the key 0600', async () => {
    const first = await startDevnet('1.0.0', { block_time_ms: 20 })
    await waitFor(async () => heightIn(first.dataDir) >= 5, 'five blocks')
    const keyFile = path.join(first.dataDir, 'nodekey')
    const key = fs.readFileSync(keyFile, 'utf8')
    expect(key).toMatch(/^[0-9a-f]{64}\n$/)
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600)
    expect(await first.stop()).toBe(0)
    const height = heightIn(first.dataDir)
    expect(height).toBeGreaterThanOrEqual(5)

    const upgraded = await startDevnet('1.1.0', { halt_blocks: true }, first.dataDir)
    expect((await rpc(upgraded.url, 'eth_blockNumber')).result).toBe(`0x${height.toString(16)}`)
    expect((await rpc(upgraded.url, 'web3_clientVersion')).result).toBe('devnet-node/v1.1.0')
    expect(fs.readFileSync(keyFile, 'utf8')).toBe(key)
    expect(upgraded.output()).not.toMatch(/generated node key/)
  })

  it('exits with code 1 after crash_after_ms, and refuses a config without rpc_port', async () => {
    const node = await startDevnet('1.0.0', { crash_after_ms: 300 }, undefined, { waitForRpc: false })
    expect(await node.exit).toBe(1)
    expect(node.output()).toMatch(/crashing after 300 ms/)

    const configFile = path.join(tempDir(), 'devnet.json')
    fs.writeFileSync(configFile, JSON.stringify({ block_time_ms: 10 }))
    const failed = await promisify(execFile)(process.execPath, [releaseOf('1.0.0'), '--config', configFile, '--data-dir', tempDir()]).then(
      () => undefined,
      (err: unknown) => err as { code: number; stderr: string },
    )
    expect(failed?.code).toBe(2)
    expect(failed?.stderr).toMatch(/rpc_port is required/)
  })
})

describe('the command probe', () => {
  const node = (script: string, timeout_ms = 5_000) => ({ command: [process.execPath, '-e', script], timeout_ms })

  it('is healthy on exit 0 and takes sync_status and numeric metrics from JSON stdout', async () => {
    const cwd = tempDir()
    const report = await createCommandProbe(
      node(`console.log(JSON.stringify({ sync_status: 'syncing', metrics: { block_height: 12, lag: 1.5, name: 'x', flag: true, cwd_ok: process.cwd() === ${JSON.stringify(fs.realpathSync(cwd))} ? 1 : 0, env_ok: process.env.PROBE_MARK === 'yes' ? 1 : 0 } }))`),
      { cwd, env: { ...process.env, PROBE_MARK: 'yes' } },
    ).check()
    expect(report).toEqual({ sync_status: 'syncing', healthy: true, metrics: { block_height: 12, lag: 1.5, cwd_ok: 1, env_ok: 1 } })
  })

  it('ignores stdout that is not JSON and a sync_status outside the enum', async () => {
    const cwd = tempDir()
    expect(await createCommandProbe(node(`console.log('all good')`), { cwd }).check()).toEqual({ sync_status: 'unknown', healthy: true, metrics: {} })
    expect(await createCommandProbe(node(`console.log('{"sync_status":"fast","metrics":[1]}')`), { cwd }).check()).toEqual({ sync_status: 'unknown', healthy: true, metrics: {} })
  })

  it('is unhealthy on a non-zero exit, with the first line of stderr cut to 200 characters', async () => {
    const cwd = tempDir()
    const failing = await createCommandProbe(node(`console.error('\\nrpc refused\\nsecond line'); console.log('{"sync_status":"stalled"}'); process.exit(3)`), { cwd }).check()
    expect(failing).toEqual({ sync_status: 'stalled', healthy: false, metrics: {}, error: 'rpc refused' })
    const long = await createCommandProbe(node(`console.error('x'.repeat(500)); process.exit(1)`), { cwd }).check()
    expect(long.error).toBe('x'.repeat(200))
    expect(await createCommandProbe(node('process.exit(4)'), { cwd }).check()).toEqual({ sync_status: 'unknown', healthy: false, metrics: {}, error: 'exited with code 4' })
    const missing = await createCommandProbe({ command: [path.join(cwd, 'no-such-check')], timeout_ms: 1_000 }, { cwd }).check()
    expect(missing).toMatchObject({ healthy: false, sync_status: 'unknown' })
    expect(missing.error).toMatch(/ENOENT/)
  })

  it('stops a check that runs past timeout_ms, including the processes it started', async () => {
    const cwd = tempDir()
    const pidFile = path.join(cwd, 'grandchild.pid')
    // The check starts a long-running grandchild (as a shell script's commands would), then hangs.
    const grandchildScript = `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); setInterval(() => {}, 1000)`
    const script = `require('child_process').spawn(process.execPath, ['-e', ${JSON.stringify(grandchildScript)}], { stdio: 'inherit' }); setInterval(() => {}, 1000)`
    const started = Date.now()
    const report = await createCommandProbe(node(script, 1_500), { cwd }).check()
    expect(Date.now() - started).toBeLessThan(4_000)
    expect(report).toEqual({ sync_status: 'unknown', healthy: false, metrics: {}, error: 'no result within 1500 ms' })
    const grandchild = Number(fs.readFileSync(pidFile, 'utf8'))
    await waitFor(async () => !isRunning(grandchild), 'the grandchild to be killed', 5_000)
  })
})

/** Linux: a zombie waiting for its reaper is no longer running. */
function isRunning(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z'
  } catch {
    return false
  }
}

describe('createProbe', () => {
  it('builds the probe a configure command names', async () => {
    const { url } = await startGanache()
    const ethereum = createProbe(probeSpec.parse({ type: 'ethereum_jsonrpc', url }), { cwd: tempDir() })
    expect(await ethereum.check()).toMatchObject({ sync_status: 'synced', healthy: true })
    const command = createProbe(probeSpec.parse({ type: 'command', command: [process.execPath, '-e', `console.log('{"sync_status":"synced"}')`] }), { cwd: tempDir() })
    expect(await command.check()).toEqual({ sync_status: 'synced', healthy: true, metrics: {} })
  })
})
