/**
 * The bitcoin_rpc probe against a real Litecoin Core node (Debian's litecoind, -regtest, offline):
 * cookie authentication, the sync policy in Bitcoin terms, the stall rule, and errors that carry
 * neither the cookie nor URL credentials.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { probeSpec, type ProbeSpec } from '../../../src/agent-gateway/protocol.js'
import { createBitcoinRpcClient, flushChainState } from '../../../src/node-agent/probes/bitcoin-rpc.js'
import { createProbe } from '../../../src/node-agent/probes/index.js'
import { startLitecoind, type RunningLitecoind } from '../../helpers/litecoind.js'
import { freePort } from '../../helpers/ports.js'

/** Any regtest address: the blocks' rewards are nobody's business here. */
const MINER = 'rltc1qrecadm7lzu2c4vex2eajjuce0t2n9j7njy6ny6'
const REGTEST_POLICY = { initial_block_download: 'ignore', min_connections: 0, max_header_lag: 0 }

describe('the bitcoin_rpc probe against litecoind', () => {
  let root: string
  let state: string
  let node: RunningLitecoind
  let other: RunningLitecoind | undefined

  /** The agent's view: the state dir is the probe's cwd and the chain's data dir is data/. */
  const spec = (fields: Record<string, unknown> = {}): ProbeSpec =>
    probeSpec.parse({ type: 'bitcoin_rpc', url: node.url, cookie_file: 'data/regtest/.cookie', timeout_ms: 5_000, ...fields })

  beforeAll(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bitcoin-probe-'))
    state = path.join(root, 'state')
    node = await startLitecoind(path.join(state, 'data'))
  }, 60_000)
  afterAll(async () => {
    await Promise.all([node?.stop(), other?.stop()])
    fs.rmSync(root, { recursive: true, force: true })
  })

  it('a fresh offline regtest node: syncing by the default policy (initial block download, no peers), synced by the regtest one', async () => {
    const strict = await createProbe(spec(), { cwd: state }).check()
    expect(strict).toMatchObject({ healthy: true, sync_status: 'syncing' })
    expect(strict.metrics).toMatchObject({ block_height: 0, highest_block: 0, header_lag: 0, peer_count: 0, initial_block_download: 1, rpc_up: 1 })
    expect(strict.metrics.rpc_latency_ms).toBeGreaterThanOrEqual(0)

    // Each rule of the policy alone keeps it syncing.
    for (const policy of [
      { ...REGTEST_POLICY, initial_block_download: 'syncing' },
      { ...REGTEST_POLICY, min_connections: 1 },
    ]) {
      expect((await createProbe(spec({ sync_policy: policy }), { cwd: state }).check()).sync_status, JSON.stringify(policy)).toBe('syncing')
    }
    expect(await createProbe(spec({ sync_policy: REGTEST_POLICY }), { cwd: state }).check()).toMatchObject({ healthy: true, sync_status: 'synced' })
  })

  it('mined blocks: the height follows, initial block download ends, and a head that stays put is no stall', async () => {
    const probe = createProbe(spec({ sync_policy: REGTEST_POLICY }), { cwd: state, stallChecks: 2, minStallMs: 0 })
    await node.rpc('generatetoaddress', [3, MINER])
    const reports = [await probe.check(), await probe.check(), await probe.check(), await probe.check()]
    for (const report of reports) {
      expect(report).toMatchObject({ healthy: true, sync_status: 'synced', metrics: { block_height: 3, highest_block: 3, initial_block_download: 0 } })
    }
    // The default policy still wants a peer.
    expect((await createProbe(spec(), { cwd: state }).check()).sync_status).toBe('syncing')
  })

  it('headers it cannot get the blocks of (no peers): syncing, then stalled; block_lag in header_lag', async () => {
    // A second node learns the first one's headers (submitheader) but, offline, never gets their blocks.
    other = await startLitecoind(path.join(root, 'other', 'data'))
    const height = await node.rpc<number>('getblockcount')
    for (let h = 1; h <= height; h++) {
      const hash = await node.rpc<string>('getblockhash', [h])
      await other.rpc('submitheader', [await node.rpc<string>('getblockheader', [hash, false])])
    }
    const probe = createProbe(
      probeSpec.parse({ type: 'bitcoin_rpc', url: other.url, cookie_file: 'data/regtest/.cookie', sync_policy: REGTEST_POLICY }),
      { cwd: path.join(root, 'other'), stallChecks: 2, minStallMs: 0 },
    )
    const first = await probe.check()
    expect(first).toMatchObject({ healthy: true, sync_status: 'syncing', metrics: { block_height: 0, highest_block: height, header_lag: height } })
    expect((await probe.check()).sync_status).toBe('syncing')
    expect((await probe.check()).sync_status).toBe('stalled')
    // Tolerated by a policy allowing that much lag: synced, and no stall.
    const lenient = createProbe(
      probeSpec.parse({ type: 'bitcoin_rpc', url: other.url, cookie_file: 'data/regtest/.cookie', sync_policy: { ...REGTEST_POLICY, max_header_lag: height } }),
      { cwd: path.join(root, 'other'), stallChecks: 1, minStallMs: 0 },
    )
    expect((await lenient.check()).sync_status).toBe('synced')
    expect((await lenient.check()).sync_status).toBe('synced')
    await other.stop()
  })

  it('a wrong cookie, a missing cookie, credentials in the URL, a closed port: unhealthy, and no error carries a secret or the URL', async () => {
    const cookie = fs.readFileSync(node.cookieFile, 'utf8').trim()
    const fake = path.join(state, 'wrong.cookie')
    fs.writeFileSync(fake, '__cookie__:0123456789abcdef0123456789abcdef')
    const wrong = await createProbe(spec({ cookie_file: 'wrong.cookie' }), { cwd: state }).check()
    expect(wrong).toEqual({ healthy: false, sync_status: 'unknown', metrics: { rpc_up: 0 }, error: 'the node refused the RPC credentials (HTTP 401)' })

    const missing = await createProbe(spec({ cookie_file: 'data/none/.cookie' }), { cwd: state }).check()
    expect(missing.error).toBe('no RPC cookie at data/none/.cookie (the node writes it when its RPC server starts)')

    const withPassword = `http://nodeplane:s3cret-passw0rd@127.0.0.1:${node.rpcPort}`
    const urlCredentials = await createProbe(probeSpec.parse({ type: 'bitcoin_rpc', url: withPassword }), { cwd: state }).check()
    expect(urlCredentials.error).toBe('the node refused the RPC credentials (HTTP 401)')
    // The URL's credentials are the ones used when there is no cookie file: the cookie's work.
    const [user, password] = cookie.split(':') as [string, string]
    const viaUrl = await createProbe(probeSpec.parse({ type: 'bitcoin_rpc', url: `http://${user}:${password}@127.0.0.1:${node.rpcPort}`, sync_policy: REGTEST_POLICY }), { cwd: state }).check()
    expect(viaUrl).toMatchObject({ healthy: true, sync_status: 'synced' })

    const closedPort = await freePort()
    const closed = await createProbe(probeSpec.parse({ type: 'bitcoin_rpc', url: `http://nodeplane:s3cret-passw0rd@127.0.0.1:${closedPort}`, cookie_file: 'data/regtest/.cookie' }), { cwd: state }).check()
    expect(closed.error).toBe('cannot reach the RPC endpoint (ECONNREFUSED)')

    const client = createBitcoinRpcClient({ url: node.url, cookie_file: 'data/regtest/.cookie', timeout_ms: 5_000 }, state)
    const unknownMethod = await client.call('nosuchmethod').catch((err: Error) => err)
    expect((unknownMethod as Error).message).toBe('nosuchmethod: JSON-RPC error -32601: Method not found')

    for (const report of [wrong, missing, urlCredentials, closed]) {
      const text = JSON.stringify(report)
      for (const secret of [cookie, password, 's3cret-passw0rd', String(node.rpcPort), String(closedPort), '127.0.0.1']) expect(text).not.toContain(secret)
    }
  })

  it('flushChainState writes the chain to disk: a copy of the running node starts at its height', async () => {
    const height = await node.rpc<number>('getblockcount')
    await flushChainState({ url: node.url, cookie_file: 'data/regtest/.cookie', timeout_ms: 5_000 }, state)
    const copy = path.join(root, 'copy', 'data')
    fs.cpSync(path.join(state, 'data'), copy, { recursive: true })
    for (const lock of ['regtest/.lock', 'regtest/.cookie']) fs.rmSync(path.join(copy, lock), { force: true })
    const restarted = await startLitecoind(copy)
    try {
      expect(await restarted.rpc<number>('getblockcount')).toBe(height)
    } finally {
      await restarted.stop()
    }
  })
})
