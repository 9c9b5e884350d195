/**
 * The `ssh` provider on real hosts (docs/infrastructure.md, "The `ssh` provider", "Placement"),
 * on both databases: two network-namespace hosts running sshd (test/helpers/netns.ts), added
 * through the hosts service (SSH check, host key pinned); a real agent-gateway listening on the
 * root namespace's end of the first host's link, with a certificate for that address; the
 * provision and terminate workflows with the `ssh` provider; node agents from the one-file
 * bundle running real anvil chains in the namespaces and becoming healthy.
 *
 * One fleet for the file (each dialect adds it to its own database, both at once, each with its
 * own RPC ports; node directories are named by node ids): host A takes two
 * nodes, host B one. A user's two nodes are spread over both; a third node fills A; a fourth finds
 * no room and fails with "no host with capacity in region test-1" (a provision_failed incident and
 * a notification), with nothing made for it anywhere; terminating a node removes its directory and
 * every process of it from its host and frees its room; migrating a node moves it to the other
 * host, never back onto its own.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Writable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { AgentGateway } from '../../../src/agent-gateway/gateway.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, getProfile, loadChainCatalogue, resolvePlacement, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { evaluateHeartbeats } from '../../../src/health/heartbeat-evaluation.js'
import { handleHealthEvent, healthEventSchema } from '../../../src/health/incident-consumer.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../../../src/health/incident-rules.js'
import { evaluatePolicies } from '../../../src/health/policy-evaluation.js'
import { DEFAULT_INSTANCE_TYPES } from '../../../src/hosts/instance-types.js'
import { addHost } from '../../../src/hosts/service.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import type { Host as FleetHost } from '../../../src/hosts/store.js'
import { createLogger } from '../../../src/log.js'
import { healthEventSubject } from '../../../src/nodes/health-state-machine.js'
import { findNode, insertNode, type NodeRecord } from '../../../src/nodes/node-store.js'
import { requestMigration, requestProvision, requestTermination, type LifecycleDeps } from '../../../src/provisioning/index.js'
import { parseHostId, SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { ensureServerKeyPair } from '../../../src/secrets/server-key.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { startLifecycleWorker, untilRunFinished } from '../provisioning/harness.js'
import { prepareFleet, processesOf, quiet, startFleetGateway, type FleetFiles } from './fleet-harness.js'

const REGION = 'test-1'
const INSTANCE_TYPE = 'test.anvil'
const NEEDS = { cpu: 1, memory_bytes: 2 ** 30, disk_bytes: 2 ** 30 }

let hosts: NetnsHost[] = []
let files: FleetFiles
let catalogue: ChainCatalogue

beforeAll(async () => {
  hosts = [await startNetnsHost(), await startNetnsHost()]
  // Agents dial the gateway on the first host's link; the other reaches it through its own.
  files = await prepareFleet(hosts, (hosts[0] as NetnsHost).gatewayAddress)
  // ethereum-anvil sold on the fleet: every duration on provider ssh in region test-1.
  const repo = await loadChainCatalogue(defaultConfigDir())
  const anvil = getProfile(repo, 'ethereum-anvil')
  const durations = Object.fromEntries(Object.keys(anvil.durations).map((d) => [d, { provider: 'ssh', region: REGION, instance_type: INSTANCE_TYPE }]))
  catalogue = { ...repo, profiles: new Map([...repo.profiles, ['ethereum-anvil', { ...anvil, durations }]]) }
}, 120_000)
afterAll(async () => {
  for (const host of hosts) await host.stop()
})

describeEachDialectConcurrently('the ssh provider on a fleet of namespace hosts, on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let pool: SshPool
  let gateway: AgentGateway
  let provider: SshInfrastructureProvider
  let worker: WorkflowWorker
  let evaluator: NodeJS.Timeout | undefined
  let evaluating = Promise.resolve()
  const logLines: string[] = []
  const fleet = new Map<string, { record: FleetHost; netns: NetnsHost }>()

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    pool = createSshPool({ connectTimeoutMs: 5_000, execTimeoutMs: 60_000 })
    const keys = fileSshKeyStore(tempDir('nodeplane-ssh-keys-'))
    const capacities = [
      { ...NEEDS, cpu: 2, memory_bytes: 4 * 2 ** 30, disk_bytes: 4 * 2 ** 30 },
      { ...NEEDS, memory_bytes: 4 * 2 ** 30, disk_bytes: 4 * 2 ** 30 },
    ]
    for (const [i, netns] of hosts.entries()) {
      const record = await addHost(
        { db, pool, keys, minFreeDiskBytes: 2 ** 20 },
        { name: `host-${'ab'[i]}`, address: netns.address, port: netns.port, user: 'root', privateKey: netns.privateKey, region: REGION, rootDir: netns.rootDir, capacity: capacities[i] as typeof NEEDS, labels: {} },
      )
      expect(record.host_key_fingerprint).toBe(netns.hostKeyFingerprint)
      fleet.set(record.id, { record, netns })
    }

    const started = await startFleetGateway(db, (hosts[0] as NetnsHost).gatewayAddress, files.tls)
    gateway = started.gateway
    // Whatever the provider logs goes here, to be searched for the tokens it must never contain.
    const logger = createLogger({
      level: 'debug',
      destination: new Writable({
        write(chunk: Buffer, _encoding, done) {
          logLines.push(chunk.toString('utf8'))
          done()
        },
      }),
    })
    provider = new SshInfrastructureProvider({
      db,
      pool,
      keys,
      logger,
      instanceTypes: { ...DEFAULT_INSTANCE_TYPES, [INSTANCE_TYPE]: NEEDS },
      placementWaitMs: 1_000,
      placementRetryIntervalMs: 200,
      agentBundle: files.bundle,
      // Both dialects' fleets are the same two machines: each its own ports there.
      rpcPorts: dialect === 'sqlite' ? { first: 20_000, last: 20_099 } : { first: 20_100, last: 20_199 },
      agentEnv: { LOG_LEVEL: 'info', NODE_AGENT_HEARTBEAT_INTERVAL: '200ms' },
      stopGraceMs: 10_000,
    })
    const masterKey = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    await ensureServerKeyPair(db, masterKey)
    const deps: LifecycleDeps = {
      db,
      logger: quiet,
      chains: staticChainSource(catalogue),
      masterKey,
      providers: new Map([[provider.name, provider]]),
      agentBootstrap: { gatewayTarget: started.target, caPem: files.tls.ca.toString() },
      backupStoreUrl: pathToFileURL(tempDir('nodeplane-ssh-backups-')).href,
      migrationCooldownMs: 3_600_000,
      fenceTimeoutMs: 3_000,
      streamTokenRecheckMs: 250,
      agentReadyWaitMs: 60_000,
      commandTimeoutMs: 60_000,
      pollIntervalMs: 50,
    }
    worker = startLifecycleWorker(db, deps, 4)
    evaluator = setInterval(() => {
      evaluating = evaluating
        .then(async () => {
          const now = new Date()
          await evaluateHeartbeats(db, { now, heartbeatTimeoutMs: 60_000, intervalMs: 250, logger: quiet })
          await evaluatePolicies(db, { now, catalogue, reportMaxAgeMs: 60_000, logger: quiet })
        })
        .catch(() => undefined)
    }, 250)
  }, 60_000)

  afterAll(async () => {
    clearInterval(evaluator)
    await evaluating
    await worker?.stop()
    // Whatever is still placed goes, with its agent and chain: the next dialect starts on empty hosts.
    const left = (await db('host_reservations').select('host_id', 'host_key')) as Array<{ host_id: string; host_key: string }>
    await Promise.all(left.map((r) => provider.destroyHost(`${r.host_id}/${r.host_key}`).catch(() => undefined)))
    await gateway?.close(200)
    await pool?.close()
    await t?.destroy()
  }, 60_000)

  async function newAnvilNode(userId?: string): Promise<NodeRecord> {
    const owner = userId ?? (await insertUser(db))
    const placement = resolvePlacement(getProfile(catalogue, 'ethereum-anvil'), 'full', '1m')
    const subscriptionId = await insertSubscriptionOf(db, owner, { chain: 'ethereum-anvil', instanceType: placement.instance_type })
    return insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'ethereum-anvil', node_type: 'full', provider: placement.provider, region: placement.region, instance_type: placement.instance_type })
  }

  async function untilHealthy(nodeId: string): Promise<NodeRecord> {
    return waitFor(async () => {
      const node = await findNode(db, nodeId)
      return node?.state === 'healthy' && node.sync_status === 'synced' && node.application_health === 'ok' && node
    }, `node ${nodeId} healthy`, 90_000, 100)
  }

  /** Where the node runs: its fleet host, the namespace, the node's directory there. */
  function whereIs(node: NodeRecord): { record: FleetHost; netns: NetnsHost; hostKey: string; dir: string } {
    const { fleetHostId, hostKey } = parseHostId(node.host_id ?? '')
    const on = fleet.get(fleetHostId)
    if (!on) throw new Error(`node ${node.id} is on no host of the fleet (${node.host_id})`)
    return { ...on, hostKey, dir: path.join(on.netns.rootDir, 'nodes', hostKey) }
  }

  const nodeDirs = (netns: NetnsHost) => (fs.existsSync(path.join(netns.rootDir, 'nodes')) ? fs.readdirSync(path.join(netns.rootDir, 'nodes')).sort() : [])

  const provisioned: NodeRecord[] = []

  it("provisions a user's two nodes onto both hosts (spread), each a real anvil chain under an agent from the bundle, healthy", async () => {
    const owner = await insertUser(db)
    const nodes = [await newAnvilNode(owner), await newAnvilNode(owner)]
    const runs = await Promise.all(nodes.map(async (n) => untilRunFinished(db, (await requestProvision(db, n.id)).run.id, 120_000)))
    for (const r of runs) expect(r.status, JSON.stringify(r.error)).toBe('completed')
    for (const n of nodes) provisioned.push(await untilHealthy(n.id))

    const places = provisioned.map(whereIs)
    expect(new Set(places.map((p) => p.record.name))).toEqual(new Set(['host-a', 'host-b']))
    for (const [i, p] of places.entries()) {
      const node = provisioned[i] as NodeRecord
      expect(node).toMatchObject({ provider: 'ssh', region: REGION, instance_type: INSTANCE_TYPE, host_ip: p.netns.address })
      expect(fs.statSync(path.join(p.dir, 'agent-token')).mode & 0o777).toBe(0o600)
      expect(fs.statSync(p.dir).mode & 0o777).toBe(0o700)
      expect(await provider.hostStatus(node.host_id as string)).toBe('running')
      // The agent and the chain run inside the host's namespace, from the node's directory.
      expect(processesOf(p.netns, p.hostKey).length).toBeGreaterThanOrEqual(2)
      const token = fs.readFileSync(path.join(p.dir, 'agent-token'), 'utf8').trim()
      expect(logLines.join('')).not.toContain(token)
      expect(JSON.stringify(await db('nodes').where({ id: node.id }).first())).not.toContain(token)
      expect(JSON.stringify(await db('host_reservations').select('*'))).not.toContain(token)
    }
    // One bundle per host, whatever the number of nodes.
    for (const { netns } of fleet.values()) expect(fs.readdirSync(path.join(netns.rootDir, 'agent')).filter((f) => !f.startsWith('.'))).toHaveLength(1)
  }, 240_000)

  it('fills the fleet: a third node packs onto the host with room; a fourth fails with "no host with capacity", with nothing made for it', async () => {
    const third = await newAnvilNode()
    const done = await untilRunFinished(db, (await requestProvision(db, third.id)).run.id, 120_000)
    expect(done.status, JSON.stringify(done.error)).toBe('completed')
    const placedThird = await untilHealthy(third.id)
    expect(whereIs(placedThird).record.name).toBe('host-a')
    provisioned.push(placedThird)
    // Two nodes on host A: each its own port.
    const ports = (await db('host_reservations').where({ host_id: whereIs(placedThird).record.id }).pluck('rpc_port')).map(Number)
    expect(new Set(ports).size).toBe(2)

    const fourth = await newAnvilNode()
    const failed = await untilRunFinished(db, (await requestProvision(db, fourth.id)).run.id, 60_000)
    expect(failed.status).toBe('failed')
    const node = await findNode(db, fourth.id)
    expect(node).toMatchObject({ state: 'failed', host_id: null })
    expect(await db('host_reservations').where({ node_id: fourth.id })).toEqual([])
    for (const { netns } of fleet.values()) expect(nodeDirs(netns).filter((d) => d.startsWith(fourth.id))).toEqual([])

    // The failure's health event raises an operator incident and tells the user.
    const events = ((await db('outbox').where({ subject: healthEventSubject(fourth.id) }).select('payload')) as Array<{ payload: unknown }>).map((r) =>
      healthEventSchema.parse(typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload),
    )
    const toFailed = events.find((e) => e.to === 'failed')
    expect(toFailed?.reason).toMatch(/no host with capacity in region test-1/)
    await db.transaction((trx) => handleHealthEvent(trx, toFailed as NonNullable<typeof toFailed>, { logger: quiet, flapping: DEFAULT_INCIDENT_SETTINGS.flapping, now: new Date() }))
    const incident = await db('incidents').where({ node_id: fourth.id }).first()
    expect(incident).toMatchObject({ category: 'provision_failed' })
    expect(String(incident.description)).toMatch(/no host with capacity in region test-1/)
    const subscription = await db('subscriptions').where({ id: fourth.subscription_id }).first('user_id')
    const notes = await db('notifications').where({ user_id: subscription.user_id })
    expect(notes.map((n: { kind: string }) => n.kind)).toContain('incident_opened')
  }, 240_000)

  it("terminating a node stops its agent and chain on its host, removes its directory, and frees its room", async () => {
    const node = provisioned[0] as NodeRecord
    const where = whereIs(node)
    expect(processesOf(where.netns, where.hostKey).length).toBeGreaterThan(0)
    const done = await untilRunFinished(db, (await requestTermination(db, node.id, 'test')).run.id, 120_000)
    expect(done.status, JSON.stringify(done.error)).toBe('completed')
    expect((await findNode(db, node.id))?.state).toBe('terminated')
    expect(fs.existsSync(where.dir)).toBe(false)
    expect(processesOf(where.netns, where.hostKey)).toEqual([])
    expect(await provider.hostStatus(node.host_id as string)).toBe('missing')
    expect(await db('host_reservations').where({ node_id: node.id })).toEqual([])
    // The other nodes kept running.
    for (const other of provisioned.slice(1)) expect(await provider.hostStatus(other.host_id as string)).toBe('running')
  }, 180_000)

  it('migrating a node places it on the other host (never its own), healthy there, and removes it from the old one', async () => {
    const live = provisioned.slice(1)
    const used = new Map<string, number>()
    for (const n of live) used.set(whereIs(n).record.id, (used.get(whereIs(n).record.id) ?? 0) + 1)
    // The host with room left (A holds two, B one); the node to move is one on the other host.
    const roomy = [...fleet.values()].find(({ record }) => (used.get(record.id) ?? 0) < record.capacity.cpu)?.record
    const moving = live.find((n) => whereIs(n).record.id !== roomy?.id) as NodeRecord
    const from = whereIs(moving)

    const done = await untilRunFinished(db, (await requestMigration(db, moving.id, { reason: 'test', force: true })).run.id, 150_000)
    expect(done.status, JSON.stringify(done.error)).toBe('completed')
    expect(done.result).toMatchObject({ outcome: 'migrated', old_host_id: moving.host_id })
    const moved = await untilHealthy(moving.id)
    const to = whereIs(moved)
    expect(to.record.id).toBe(roomy?.id)
    expect(to.record.id).not.toBe(from.record.id)
    expect(await provider.hostStatus(moved.host_id as string)).toBe('running')
    expect(fs.existsSync(from.dir)).toBe(false)
    expect(processesOf(from.netns, from.hostKey)).toEqual([])
    expect((await db('host_reservations').where({ node_id: moving.id }).pluck('host_key'))).toEqual([to.hostKey])
  }, 240_000)
})
