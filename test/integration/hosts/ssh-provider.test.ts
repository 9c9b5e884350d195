/**
 * The `ssh` provider's own contract on a real host (a network namespace running sshd), on both
 * databases at once (each its own database, gateway and key directory; node directories are
 * named by node ids, so the two share the host safely): creating again with the same host key is
 * the same host with one agent and the latest token, also after the first agent was refused; status over SSH; destroying twice; an agent
 * the gateway refused is never restarted; an unknown instance type and a failed bootstrap leave
 * nothing placed or written. The workflows on a fleet are in ssh-fleet.test.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { createAgentToken } from '../../../src/agent-gateway/tokens.js'
import type { AgentGateway } from '../../../src/agent-gateway/gateway.js'
import type { Db } from '../../../src/db/knex.js'
import { addHost } from '../../../src/hosts/service.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore, type SshKeyStore } from '../../../src/hosts/ssh-keys.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { parseHostId, SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import type { AgentBootstrap, HostSpec } from '../../../src/provisioning/infrastructure/types.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { prepareFleet, processesOf, quiet, startFleetGateway, supervisionLoopsIn, type FleetFiles } from './fleet-harness.js'

const REGION = 'test-1'
const INSTANCE_TYPE = 'test.agent'
const NEEDS = { cpu: 1, memory_bytes: 2 ** 30, disk_bytes: 2 ** 30 }

let host: NetnsHost
let files: FleetFiles
beforeAll(async () => {
  host = await startNetnsHost()
  files = await prepareFleet([host], host.gatewayAddress)
}, 120_000)
afterAll(async () => host?.stop())

describeEachDialectConcurrently('the ssh provider on a namespace host, on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let pool: SshPool
  let keys: SshKeyStore
  let gateway: AgentGateway | undefined
  let provider: SshInfrastructureProvider
  let bootstrap: Omit<AgentBootstrap, 'token'>

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    pool = createSshPool({ connectTimeoutMs: 5_000, execTimeoutMs: 60_000 })
    keys = fileSshKeyStore(tempDir('nodeplane-ssh-keys-'))
    await addHost(
      { db, pool, keys, minFreeDiskBytes: 2 ** 20 },
      { name: 'host-a', address: host.address, port: host.port, user: 'root', privateKey: host.privateKey, region: REGION, rootDir: host.rootDir, capacity: { cpu: 4, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 }, labels: {} },
    )
    const started = await startFleetGateway(db, host.gatewayAddress, files.tls)
    gateway = started.gateway
    bootstrap = { gatewayTarget: started.target, caPem: files.tls.ca.toString() }
    provider = new SshInfrastructureProvider({ db, pool, keys, logger: quiet, instanceTypes: { [INSTANCE_TYPE]: NEEDS }, placementWaitMs: 0, placementRetryIntervalMs: 10, agentBundle: files.bundle, stopGraceMs: 10_000 })
  }, 60_000)

  afterAll(async () => {
    const left = (await db('host_reservations').select('host_id', 'host_key')) as Array<{ host_id: string; host_key: string }>
    await Promise.all(left.map((r) => provider.destroyHost(`${r.host_id}/${r.host_key}`).catch(() => undefined)))
    await gateway?.close(200)
    await pool?.close()
    await t?.destroy()
  }, 60_000)

  async function newNode(): Promise<string> {
    const subscriptionId = await insertSubscriptionOf(db, await insertUser(db), { chain: 'ethereum-anvil', instanceType: INSTANCE_TYPE })
    return (await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'ethereum-anvil', node_type: 'full', provider: 'ssh', region: REGION, instance_type: INSTANCE_TYPE })).id
  }

  const spec = (nodeId: string, hostKey: string, token: string, instanceType = INSTANCE_TYPE): HostSpec => ({
    nodeId,
    hostKey,
    chainProfileId: 'ethereum-anvil',
    nodeType: 'full',
    region: REGION,
    instanceType,
    agent: { ...bootstrap, token },
  })

  const dirOf = (hostId: string) => path.join(host.rootDir, 'nodes', parseHostId(hostId).hostKey)

  it('creates idempotently by host key (one agent, the latest token), reports status over SSH, and destroys a host that is already gone', async () => {
    const nodeId = await newNode()
    const first = await provider.createHost(spec(nodeId, `${nodeId}-idem`, await createAgentToken(db, nodeId)))
    expect(first).toMatchObject({ provider: 'ssh', host_ip: host.address, region: REGION, instance_type: INSTANCE_TYPE })
    const dir = dirOf(first.host_id)
    // A retry's new token replaces the first: the first agent is refused, marks its directory
    // superseded and stops for good. Creating again makes the directory the node's again.
    const latest = await createAgentToken(db, nodeId)
    await waitFor(async () => (await provider.hostStatus(first.host_id)) === 'stopped', 'the first agent to be refused', 30_000, 100)
    expect(fs.existsSync(path.join(dir, 'state', 'superseded.json'))).toBe(true)
    const recreatedAt = new Date()
    expect(await provider.createHost(spec(nodeId, `${nodeId}-idem`, latest))).toEqual(first)
    expect(fs.readFileSync(path.join(dir, 'agent-token'), 'utf8')).toBe(latest)
    expect(fs.statSync(path.join(dir, 'agent-token')).mode & 0o777).toBe(0o600)
    expect(supervisionLoopsIn(host, dir)).toHaveLength(1)
    expect(await db('host_reservations').where({ node_id: nodeId })).toHaveLength(1)
    expect(await provider.hostStatus(first.host_id)).toBe('running')
    // The new agent registers with the gateway over the namespace's link, with the latest token.
    await waitFor(
      async () => {
        const registration = await findRegistration(db, nodeId)
        return registration && registration.registered_at >= recreatedAt && registration.connected_at && !registration.disconnected_at
      },
      'the new agent to register',
      30_000,
      100,
    )
    expect(await provider.hostStatus(first.host_id)).toBe('running')

    await provider.destroyHost(first.host_id)
    expect(fs.existsSync(dir)).toBe(false)
    expect(processesOf(host, parseHostId(first.host_id).hostKey)).toEqual([])
    expect(await provider.hostStatus(first.host_id)).toBe('missing')
    await provider.destroyHost(first.host_id)
    expect(await db('host_reservations').where({ node_id: nodeId })).toEqual([])
    await expect(provider.hostStatus('not-a-fleet-host')).rejects.toThrow(/not an ssh host id/)
  }, 60_000)

  it('never restarts an agent the gateway refused (exit 77): its host reports stopped', async () => {
    const nodeId = await newNode()
    const token = 'npat_not-a-token-the-gateway-knows'
    const created = await provider.createHost(spec(nodeId, `${nodeId}-refused`, token))
    const dir = dirOf(created.host_id)
    await waitFor(async () => (await provider.hostStatus(created.host_id)) === 'stopped', 'the refused agent to stop for good', 30_000, 100)
    expect(supervisionLoopsIn(host, dir)).toEqual([])
    expect(fs.readFileSync(path.join(dir, 'agent.log'), 'utf8')).not.toContain(token)
    await provider.destroyHost(created.host_id)
    expect(fs.existsSync(dir)).toBe(false)
  }, 60_000)

  it('refuses an instance type it knows no needs for, and removes what it placed when the bootstrap fails', async () => {
    const nodeId = await newNode()
    await expect(provider.createHost(spec(nodeId, `${nodeId}-bad`, 'x', 'nope.huge'))).rejects.toThrow(/instance type nope.huge states no needs for the ssh provider \(known: test.agent/)
    const broken = new SshInfrastructureProvider({ db, pool, keys, logger: quiet, instanceTypes: { [INSTANCE_TYPE]: NEEDS }, placementWaitMs: 0, placementRetryIntervalMs: 10, agentBundle: '/nonexistent/node-agent.mjs' })
    await expect(broken.createHost(spec(nodeId, `${nodeId}-bad`, 'x'))).rejects.toThrow(/node-agent bundle \/nonexistent\/node-agent.mjs does not exist/)
    expect(await db('host_reservations').where({ node_id: nodeId })).toEqual([])
    expect(fs.existsSync(path.join(host.rootDir, 'nodes', `${nodeId}-bad`))).toBe(false)
  }, 60_000)
})
