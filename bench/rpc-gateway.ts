/**
 * The customer's endpoint (issue 18, "Fast"): `eth_blockNumber` through `nodeplane daemon
 * rpc-gateway` (its own process, a real database, the key checked and the rate limit taken on
 * every call) against the same real anvil called directly, load from autocannon's CLI in a third
 * process:
 *
 * - throughput, 16 connections flat out, interleaved rounds (median): aim ≥ 0.8 of direct;
 * - latency at a fixed 1,000 requests/s: the gateway's added p99 (aim < 2 ms);
 * - merged reads: 100 concurrent identical `eth_getBalance` calls from another process, and how
 *   many of them the gateway sent on to the node (its merge counter on /metrics).
 */
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createApiKey } from '../src/auth/api-keys.js'
import { createUser } from '../src/auth/users.js'
import { freePort } from '../test/helpers/ports.js'
import { insertServingNode, startAnvil } from '../test/helpers/rpc-gateway-fixtures.js'
import { startBenchDaemon, type BenchDaemon } from './daemon.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const CONNECTIONS = 16
const ROUNDS = 5
const FIXED_RATE = 1_000
const CONCURRENT_READS = 100
const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const AUTOCANNON = path.join(ROOT, 'node_modules', 'autocannon', 'autocannon.js')
const BLOCK_NUMBER = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] })
const run = promisify(execFile)

interface Load {
  requestsPerSecond: number
  p50: number
  p99: number
}

/** autocannon's CLI against a JSON-RPC URL; fails on any non-2xx answer or socket error. */
async function load(url: string, headers: Record<string, string>, options: { seconds: number; rate?: number }): Promise<Load> {
  const args = [AUTOCANNON, '-c', String(CONNECTIONS), '-d', String(options.seconds), '-j', '-m', 'POST', '-b', BLOCK_NUMBER, '-H', 'content-type=application/json']
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}=${value}`)
  if (options.rate) args.push('-R', String(options.rate))
  args.push(url)
  const { stdout } = await run(process.execPath, args, { maxBuffer: 16 * 1024 * 1024 })
  const result = JSON.parse(stdout) as { requests: { average: number; total: number }; latency: { p50: number; p99: number }; non2xx: number; errors: number; timeouts: number }
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts of ${result.requests.total}`)
  }
  return { requestsPerSecond: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

/** CONCURRENT_READS identical calls fired at once from a child process; resolves when all answered 200. */
async function concurrentReads(url: string, key: string): Promise<void> {
  const script = `
    const body = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'eth_getBalance', params: ['0x0000000000000000000000000000000000000001', 'latest'] })
    Promise.all(Array.from({ length: ${CONCURRENT_READS} }, () => fetch(process.argv[1], { method: 'POST', headers: { 'content-type': 'application/json', 'X-API-Key': process.argv[2] }, body })))
      .then((answers) => { if (answers.some((a) => a.status !== 200)) { console.error('a call failed'); process.exit(1) } })`
  await run(process.execPath, ['-e', script, url, key])
}

/**
 * The floor of any proxy written on Node.js: a bare `http` server that forwards each body to the
 * node on keep-alive connections and copies the answer back (no key, no limit, no route, no
 * usage), in its own process like the gateway. The gateway's distance from direct calls splits
 * into what Node's HTTP costs on both sides of a hop (this against direct) and what the gateway
 * adds on top (the gateway against this).
 */
const BARE_PROXY = `
  const http = require('node:http')
  const [target, port] = [new URL(process.argv[1]), Number(process.argv[2])]
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })
  http.createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const up = http.request({ host: target.hostname, port: target.port, path: '/', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length } }, (answer) => {
        const parts = []
        answer.on('data', (c) => parts.push(c))
        answer.on('end', () => {
          const out = Buffer.concat(parts)
          res.writeHead(answer.statusCode, { 'content-type': 'application/json', 'content-length': out.length })
          res.end(out)
        })
      })
      up.on('error', () => { res.writeHead(502); res.end() })
      up.end(body)
    })
  }).listen(port, '127.0.0.1', () => console.log('listening'))`

async function startBareProxy(target: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort()
  const child = spawn(process.execPath, ['-e', BARE_PROXY, target, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve())
    child.once('exit', (code) => reject(new Error(`the bare proxy exited ${code}`)))
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      child.kill('SIGTERM')
      await exited
    },
  }
}

async function mergedCalls(gatewayUrl: string, nodeId: string): Promise<number> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith('rpc_gateway_merged_calls_total{') && l.includes(`node_id="${nodeId}"`))
  return line ? Number(line.split(' ').pop()) : 0
}

export const benchRpcGateway: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const seconds = Math.max(1, Math.round(3 * ctx.scale))
  const anvil = await startAnvil(31337)
  const bareProxy = await startBareProxy(anvil.url).catch(async (err: unknown) => {
    await anvil.stop()
    throw err
  })
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const database = await benchDatabase(dialect, ctx.postgresUrl)
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-rpc-'))
      let gateway: BenchDaemon | undefined
      try {
        const { db } = database
        const user = await createUser(db, { email: `bench-rpc-${dialect}@example.test` })
        const { key } = await db.transaction((trx) => createApiKey(trx, { userId: user.id, name: 'bench', scopes: ['nodes:rpc'] }))
        const nodeId = await insertServingNode(db, user.id, 'ethereum-anvil', 'full', 'local-bench-rpc', anvil.port)
        const port = await freePort()
        gateway = await startBenchDaemon('rpc-gateway', {
          DATABASE_URL: database.url,
          NATS_URL: ctx.natsUrl,
          NODEPLANE_DATA_DIR: dataDir,
          RPC_GATEWAY_PORT: String(port),
          RPC_GATEWAY_RATE_LIMIT_PER_SECOND: '1000000',
          RPC_GATEWAY_RATE_LIMIT_BURST: '1000000',
        }, port)
        const gatewayUrl = `http://127.0.0.1:${port}`
        const endpoint = `${gatewayUrl}/v1/${nodeId}`
        const through = { 'X-API-Key': key }
        const first = (await (await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'application/json', ...through }, body: BLOCK_NUMBER })).json()) as { result?: string }
        if (typeof first.result !== 'string') throw new Error(`eth_blockNumber through the gateway answered ${JSON.stringify(first)}`)

        await load(anvil.url, {}, { seconds: 1 }) // warm-up, not measured
        await load(endpoint, through, { seconds: 1 })
        await load(bareProxy.url, {}, { seconds: 1 })
        const direct: Load[] = []
        const bare: Load[] = []
        const proxied: Load[] = []
        for (let r = 0; r < ROUNDS; r++) {
          direct.push(await load(anvil.url, {}, { seconds }))
          bare.push(await load(bareProxy.url, {}, { seconds }))
          proxied.push(await load(endpoint, through, { seconds }))
        }
        const fixedDirect: Load[] = []
        const fixedBare: Load[] = []
        const fixedProxied: Load[] = []
        for (let r = 0; r < 3; r++) {
          fixedDirect.push(await load(anvil.url, {}, { seconds: seconds + 2, rate: FIXED_RATE }))
          fixedBare.push(await load(bareProxy.url, {}, { seconds: seconds + 2, rate: FIXED_RATE }))
          fixedProxied.push(await load(endpoint, through, { seconds: seconds + 2, rate: FIXED_RATE }))
        }
        const before = await mergedCalls(gatewayUrl, nodeId)
        await concurrentReads(endpoint, key)
        const merged = (await mergedCalls(gatewayUrl, nodeId)) - before

        const rateOf = (loads: Load[]) => median(loads.map((x) => x.requestsPerSecond))
        const rate = { direct: rateOf(direct), bare: rateOf(bare), proxied: rateOf(proxied) }
        const p99 = { direct: median(fixedDirect.map((x) => x.p99)), bare: median(fixedBare.map((x) => x.p99)), proxied: median(fixedProxied.map((x) => x.p99)) }
        const p50 = { direct: median(fixedDirect.map((x) => x.p50)), bare: median(fixedBare.map((x) => x.p50)), proxied: median(fixedProxied.map((x) => x.p50)) }
        ctx.log(
          `${dialect}: flat out ${rate.proxied.toFixed(0)}/s through the gateway, ${rate.bare.toFixed(0)}/s through a bare Node proxy, ${rate.direct.toFixed(0)}/s direct; ` +
            `at ${FIXED_RATE}/s p99 ${p99.proxied} / ${p99.bare} / ${p99.direct} ms (p50 ${p50.proxied} / ${p50.bare} / ${p50.direct}); ` +
            `${CONCURRENT_READS} identical reads: ${CONCURRENT_READS - merged} sent to the node`,
        )
        const how = `autocannon CLI in its own process, ${CONNECTIONS} connections; gateway (key check and shared rate limit on every call) and anvil each in their own process`
        figures.push(
          figure({
            name: `eth_blockNumber through the rpc-gateway, flat out (${dialect})`,
            baseline: 'the same anvil called directly, same load, interleaved rounds',
            unit: 'requests/s',
            value: rate.proxied,
            baselineValue: rate.direct,
            aim: '>= 0.8',
            notes: `${how}; median of ${ROUNDS} rounds of ${seconds} s`,
          }),
          figure({
            name: `eth_blockNumber through the rpc-gateway, flat out, against a bare Node.js proxy (${dialect})`,
            baseline: 'a bare node:http proxy to the same anvil in its own process (no key, limit, route or usage), same load, interleaved rounds',
            unit: 'requests/s',
            value: rate.proxied,
            baselineValue: rate.bare,
            notes: `what the gateway's own work costs; the bare proxy itself reaches ${(rate.bare / rate.direct).toFixed(2)} of direct (${rate.bare.toFixed(0)} against ${rate.direct.toFixed(0)}/s): Node's HTTP on both sides of a hop`,
          }),
          figure({
            name: `eth_blockNumber through the rpc-gateway at ${FIXED_RATE} requests/s (${dialect}); p99 ${p99.proxied} ms vs ${p99.direct} ms direct, added ${(p99.proxied - p99.direct).toFixed(2)} ms`,
            baseline: `the same anvil called directly at ${FIXED_RATE} requests/s`,
            unit: 'inverse p99 ms',
            value: 1 / Math.max(p99.proxied, 0.01),
            baselineValue: 1 / Math.max(p99.direct, 0.01),
            aim: 'added p99 < 2 ms',
            notes: `${how}; ratio = direct p99 / gateway p99; median of 3 rounds`,
          }),
          figure({
            name: `${CONCURRENT_READS} concurrent identical eth_getBalance calls through the rpc-gateway (${dialect}): ${CONCURRENT_READS - merged} sent to the node`,
            baseline: 'calls made',
            unit: 'calls answered per call sent to the node',
            value: CONCURRENT_READS / Math.max(1, CONCURRENT_READS - merged),
            baselineValue: 1,
            aim: `${CONCURRENT_READS} (one call to the node)`,
            notes: 'fired at once from another process; calls that arrive after the first answer are sent again, by design (docs/rpc-gateway.md)',
          }),
        )
      } finally {
        await gateway?.stop()
        await database.drop()
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    }
  } finally {
    await bareProxy.stop()
    await anvil.stop()
  }
  return figures
}
