/**
 * Customers reach nodes on fleet hosts (docs/infrastructure.md, "Where a fleet node listens";
 * docs/rpc-gateway.md, "Nodes on fleet hosts"), on both databases, through a real rpc-gateway:
 *
 * - a devnet node provisioned by the `ssh` provider onto a network-namespace host listens on the
 *   host's private address only (neither loopback nor every interface) and answers JSON-RPC through
 *   the gateway; without a key, or with another user's, nothing reaches it;
 * - litecoind (Debian's, real) runs in the namespace host with the litecoin profile rendered for
 *   that host, its RPC cookie in the node's state directory there: the gateway reads the cookie
 *   over SSH, never logs it, reads it again after litecoind restarted with a new one, and answers a
 *   node whose cookie cannot be read with the JSON-RPC 502 (nothing half-written).
 *
 * One namespace host for the file, shared by both databases (each its own ports and directories).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createApiKey } from '../../../src/auth/api-keys.js'
import { defaultConfigDir, getProfile, loadChainCatalogue, renderNodeConfig, type ChainCatalogue } from '../../../src/config/chains.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'
import { assertLitecoindInstalled, LITECOIND } from '../../helpers/litecoind.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { recordConfigure, rpc, rpcError } from '../../helpers/rpc-gateway-fixtures.js'
import { untilRunFinished, withDevnetBlockTime } from '../provisioning/harness.js'
import { prepareFleet, type FleetFiles } from './fleet-harness.js'
import { onTheFleet, startFleetStack, type FleetStack } from './fleet-stack.js'

const INSTANCE_TYPE = 'test.devnet'
const NEEDS = { cpu: 1, memory_bytes: 2 ** 30, disk_bytes: 2 ** 30 }

let host: NetnsHost
let files: FleetFiles
let catalogue: ChainCatalogue

beforeAll(async () => {
  assertLitecoindInstalled()
  host = await startNetnsHost()
  files = await prepareFleet([host], host.gatewayAddress)
  // devnet sold on the fleet; litecoin as an operator sells it there: the gateways' address allowed.
  const repo = onTheFleet(withDevnetBlockTime(await loadChainCatalogue(defaultConfigDir()), 100), 'devnet', INSTANCE_TYPE)
  const litecoin = getProfile(repo, 'litecoin')
  catalogue = { ...repo, profiles: new Map([...repo.profiles, ['litecoin', { ...litecoin, vars: { ...litecoin.vars, rpc_allow_from: host.gatewayAddress } }]]) }
}, 120_000)
afterAll(async () => {
  await host?.stop()
})

/** The addresses sockets listen on for `port` inside the host's namespace (from its /proc/net/tcp). */
function listenersInside(netns: NetnsHost, port: number): string[] {
  const table = execFileSync('ip', ['netns', 'exec', netns.namespace, 'cat', '/proc/net/tcp'], { encoding: 'utf8' })
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0')
  return table
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f[1]?.endsWith(`:${hexPort}`) && f[3] === '0A')
    .map((f) => {
      const hex = (f[1] as string).split(':')[0] as string
      return [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.')
    })
}

describeEachDialectConcurrently('nodes on a fleet host reached through the rpc-gateway, on %s', (dialect) => {
  let stack: FleetStack
  const ports = dialect === 'sqlite' ? { first: 21_000, last: 21_049 } : { first: 21_050, last: 21_099 }
  const litecoinds: ChildProcess[] = []

  beforeAll(async () => {
    stack = await startFleetStack({
      dialect,
      hosts: [{ name: 'host-a', netns: host, capacity: { cpu: 4, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 } }],
      files,
      catalogue,
      instanceTypes: { [INSTANCE_TYPE]: NEEDS },
      rpcPorts: ports,
      fenceTimeoutMs: 30_000,
      heartbeatTimeoutMs: 60_000,
      migrationGraceMs: 60_000,
    })
  }, 60_000)

  afterAll(async () => {
    for (const child of litecoinds) child.kill('SIGKILL')
    await stack?.stop()
  }, 60_000)

  it("a devnet node on the host listens on the host's private address only and answers through the gateway", async () => {
    const owner = await insertUser(stack.db)
    const node = await stack.newNode('devnet', owner)
    const run = await untilRunFinished(stack.db, (await requestProvision(stack.db, node.id)).run.id, 120_000)
    expect(run.status, JSON.stringify(run.error)).toBe('completed')
    const healthy = await stack.untilHealthy(node.id)
    expect(healthy.host_ip).toBe(host.address)
    const port = Number((await stack.db('host_reservations').where({ node_id: node.id }).first('rpc_port')).rpc_port)
    expect(listenersInside(host, port)).toEqual([host.address])

    const endpoint = `${stack.rpc.url}/v1/${node.id}`
    const { key } = await createApiKey(stack.db, { userId: owner, name: 'wallet', scopes: ['nodes:rpc'] })
    const answer = await rpc(endpoint, 'eth_blockNumber', [], { 'X-API-Key': key })
    expect(answer.status).toBe(200)
    expect((answer.body as { result: string }).result).toMatch(/^0x[0-9a-f]+$/)
    expect(Number((answer.body as { result: string }).result)).toBeGreaterThan(0)

    expect((await rpc(endpoint, 'eth_blockNumber')).status).toBe(401)
    const stranger = (await createApiKey(stack.db, { userId: await insertUser(stack.db), name: 'x', scopes: ['nodes:rpc'] })).key
    const refused = await rpc(endpoint, 'eth_blockNumber', [], { 'X-API-Key': stranger })
    expect(refused.status).toBe(404)
    expect(rpcError(refused).code).toBe(-32004)
  }, 180_000)

  it("litecoind's cookie on the fleet host is read over SSH, never logged, and read again after a restart", async () => {
    const { record } = stack.hosts.get('host-a') as NonNullable<ReturnType<FleetStack['hosts']['get']>>
    const owner = await insertUser(stack.db)
    const subscription = await insertSubscriptionOf(stack.db, owner, { chain: 'litecoin', instanceType: INSTANCE_TYPE })
    const node = await insertNode(stack.db, { subscription_id: subscription, chain_profile_id: 'litecoin', node_type: 'full', provider: 'ssh' })
    const hostKey = node.id
    const stateDir = path.join(host.rootDir, 'nodes', hostKey, 'state')
    const rpcPort = ports.last
    // The profile as the agent would render it on this host, and litecoind as the agent runs it.
    const config = renderNodeConfig(getProfile(catalogue, 'litecoin'), 'full', { rpc_port: rpcPort, rpc_host: host.address, node_id: node.id })
    for (const file of config.files) {
      fs.mkdirSync(path.dirname(path.join(stateDir, file.path)), { recursive: true })
      fs.writeFileSync(path.join(stateDir, file.path), file.content)
    }
    fs.mkdirSync(path.join(stateDir, 'data'), { recursive: true })
    const startLitecoind = () => {
      const args = config.run.args.map((a) => a.replace('{config_dir}', path.join(stateDir, 'config')).replace('{data_dir}', path.join(stateDir, 'data')))
      const child = spawn('ip', ['netns', 'exec', host.namespace, LITECOIND, ...args], { stdio: 'ignore' })
      litecoinds.push(child)
      return child
    }
    const cookieFile = path.join(stateDir, 'data', 'regtest', '.cookie')
    let litecoind = startLitecoind()
    await waitFor(async () => fs.existsSync(cookieFile), 'litecoind to write its cookie', 30_000, 50)
    await stack.db('nodes').where({ id: node.id }).update({ state: 'healthy', host_id: `${record.id}/${hostKey}`, host_ip: host.address })
    await recordConfigure(stack.db, node.id, rpcPort)

    const { key } = await createApiKey(stack.db, { userId: owner, name: 'ltc', scopes: ['nodes:rpc'] })
    const endpoint = `${stack.rpc.url}/v1/${node.id}`
    const call = () => rpc(endpoint, 'getblockcount', [], { 'X-API-Key': key })
    const first = await waitFor(async () => {
      const answer = await call()
      return answer.status === 200 && answer
    }, 'litecoind to answer through the gateway', 30_000, 100)
    expect(first.body).toMatchObject({ result: 0 })
    const cookie = fs.readFileSync(cookieFile, 'utf8').trim()
    expect(cookie).toMatch(/^__cookie__:[0-9a-f]{64}$/)

    // A restart writes a new cookie: the gateway's, kept for the route, is refused once, then read
    // again. (Killed: litecoind's orderly stop waits for the gateway's keep-alive connections.)
    const exited = new Promise((resolve) => litecoind.once('exit', resolve))
    litecoind.kill('SIGKILL')
    await exited
    litecoind = startLitecoind()
    await waitFor(async () => fs.existsSync(cookieFile) && fs.readFileSync(cookieFile, 'utf8').trim() !== cookie, 'a new cookie', 30_000, 50)
    const again = await waitFor(async () => {
      const answer = await call()
      return answer.status === 200 && answer
    }, 'litecoind to answer again with its new cookie', 30_000, 100)
    expect(again.body).toMatchObject({ result: 0 })
    const secondCookie = fs.readFileSync(cookieFile, 'utf8').trim()
    const logged = stack.logLines.join('')
    for (const secret of [cookie, secondCookie]) {
      expect(logged).not.toContain(secret.split(':')[1])
      expect(logged).not.toContain(Buffer.from(secret).toString('base64'))
    }

    // The cookie gone (say, the node's directory removed): a JSON-RPC 502, nothing else.
    const exitedAgain = new Promise((resolve) => litecoind.once('exit', resolve))
    litecoind.kill('SIGKILL')
    await exitedAgain
    fs.rmSync(path.join(host.rootDir, 'nodes', hostKey), { recursive: true, force: true })
    // Still serving as far as the database knows (no agent heartbeats for this node: keep it so).
    await stack.db('nodes').where({ id: node.id }).update({ state: 'healthy' })
    stack.rpc.routes.invalidate(node.id)
    const gone = await call()
    expect(gone.status).toBe(502)
    expect(rpcError(gone).code).toBe(-32011)
    expect(JSON.stringify(gone.body)).not.toContain(host.rootDir)

    // A cookie that is a symbolic link (the chain can write where its cookie lives) is not
    // followed: the login never reads another file of the host for it.
    const elsewhere = path.join(host.rootDir, 'not-a-cookie')
    fs.writeFileSync(elsewhere, '__cookie__:0123456789abcdef')
    fs.mkdirSync(path.dirname(cookieFile), { recursive: true })
    fs.symlinkSync(elsewhere, cookieFile)
    stack.rpc.routes.invalidate(node.id)
    const linked = await call()
    expect(linked.status).toBe(502)
    expect(rpcError(linked).code).toBe(-32011)
  }, 120_000)
})
