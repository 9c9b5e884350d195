/**
 * A control plane for a fleet of namespace hosts, in this process, from the real parts: one
 * database per dialect, the hosts added through the hosts service (SSH, host key pinned), a real
 * agent-gateway, the `ssh` provider, the lifecycle workflows, the health evaluation cycle (with the
 * migration trigger) and the host probe every `evaluationIntervalMs`, the outbox relay, the incident
 * consumer and a real rpc-gateway on one in-process bus. Node agents from the one-file bundle run
 * the chains inside the namespaces. `stop()` stops everything it started and removes every node
 * directory it placed, also after a failed test.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Writable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { expect } from 'vitest'
import { startRpcGateway, type RunningRpcGateway } from '../../../daemons/rpc-gateway.js'
import type { AgentGateway } from '../../../src/agent-gateway/gateway.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { getProfile, resolvePlacement, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { createLocalBus, type LocalBus } from '../../../src/events/local-bus.js'
import { OutboxRelay } from '../../../src/events/relay.js'
import type { BusSubscription } from '../../../src/events/bus.js'
import { runHealthEvaluationCycle } from '../../../src/health/evaluator.js'
import { startIncidentConsumer } from '../../../src/health/incident-consumer.js'
import { DEFAULT_INSTANCE_TYPES, type InstanceTypeNeeds } from '../../../src/hosts/instance-types.js'
import type { PortRange } from '../../../src/hosts/placement.js'
import { DEFAULT_PROBE_FAILURES_BEFORE_UNREACHABLE, probeHosts } from '../../../src/hosts/probe.js'
import { addHost } from '../../../src/hosts/service.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import type { Host as FleetHost } from '../../../src/hosts/store.js'
import { createLogger } from '../../../src/log.js'
import { findNode, insertNode, type NodeRecord } from '../../../src/nodes/node-store.js'
import type { LifecycleDeps } from '../../../src/provisioning/index.js'
import { parseHostId, SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { ensureServerKeyPair } from '../../../src/secrets/server-key.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'
import type { NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { gatewaySettings } from '../../helpers/rpc-gateway-fixtures.js'
import { startLifecycleWorker } from '../provisioning/harness.js'
import { quiet, startFleetGateway, type FleetFiles } from './fleet-harness.js'

export const FLEET_REGION = 'test-1'

export interface FleetStackOptions {
  dialect: Dialect
  hosts: ReadonlyArray<{ name: string; netns: NetnsHost; capacity: InstanceTypeNeeds }>
  files: FleetFiles
  catalogue: ChainCatalogue
  instanceTypes: Record<string, InstanceTypeNeeds>
  /** The hosts' ports for this database's nodes (each dialect its own when both share the hosts). */
  rpcPorts: PortRange
  /** NODE_AGENT_FENCE_TIMEOUT and the migrate workflow's wait. */
  fenceTimeoutMs: number
  /** HEARTBEAT_TIMEOUT and MIGRATION_GRACE of the evaluation cycle (the invariant: fence < both together). */
  heartbeatTimeoutMs: number
  migrationGraceMs: number
  evaluationIntervalMs?: number
  /** HOSTS_PLACEMENT_WAIT: how long a provisioning waits for room before it fails (default 10 s). */
  placementWaitMs?: number
}

export interface FleetStack {
  db: Db
  provider: SshInfrastructureProvider
  pool: SshPool
  rpc: RunningRpcGateway
  /** The fleet's hosts by name: the record as added and the namespace. */
  hosts: Map<string, { record: FleetHost; netns: NetnsHost }>
  /** Every line the provider and the rpc-gateway logged. */
  logLines: string[]
  newNode(chain: string, owner?: string): Promise<NodeRecord>
  untilHealthy(nodeId: string, timeoutMs?: number): Promise<NodeRecord>
  whereIs(node: NodeRecord): { name: string; record: FleetHost; netns: NetnsHost; hostKey: string; dir: string }
  stop(): Promise<void>
}

function capture(lines: string[]): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'))
      done()
    },
  })
}

export async function startFleetStack(options: FleetStackOptions): Promise<FleetStack> {
  const stops: Array<() => Promise<unknown>> = []
  const stop = async () => {
    for (const step of stops.reverse()) await step().catch(() => undefined)
    stops.length = 0
  }
  try {
    return await start(options, stops, stop)
  } catch (err) {
    await stop()
    throw err
  }
}

async function start(options: FleetStackOptions, stops: Array<() => Promise<unknown>>, stop: () => Promise<void>): Promise<FleetStack> {
  const t: TestDatabase = await createTestDatabase(options.dialect)
  stops.push(() => t.destroy())
  const db = t.db
  // The production defaults (10 s handshakes): a loaded test machine answers SSH slowly at times.
  const pool = createSshPool({ execTimeoutMs: 60_000 })
  stops.push(() => pool.close())
  const keysDir = tempDir('nodeplane-fleet-keys-')
  const keys = fileSshKeyStore(keysDir)
  const hosts = new Map<string, { record: FleetHost; netns: NetnsHost }>()
  for (const host of options.hosts) {
    const record = await addHost(
      { db, pool, keys, minFreeDiskBytes: 2 ** 20 },
      { name: host.name, address: host.netns.address, port: host.netns.port, user: 'root', privateKey: host.netns.privateKey, region: FLEET_REGION, rootDir: host.netns.rootDir, capacity: host.capacity, labels: {} },
    )
    hosts.set(host.name, { record, netns: host.netns })
  }
  const gatewayAddress = (options.hosts[0] as { netns: NetnsHost }).netns.gatewayAddress
  const { gateway, target }: { gateway: AgentGateway; target: string } = await startFleetGateway(db, gatewayAddress, options.files.tls)
  stops.push(() => gateway.close(200))

  const logLines: string[] = []
  const logger = createLogger({ level: 'debug', destination: capture(logLines) })
  const provider = new SshInfrastructureProvider({
    db,
    pool,
    keys,
    logger,
    instanceTypes: { ...DEFAULT_INSTANCE_TYPES, ...options.instanceTypes },
    placementWaitMs: options.placementWaitMs ?? 10_000,
    placementRetryIntervalMs: 200,
    agentBundle: options.files.bundle,
    rpcPorts: options.rpcPorts,
    agentEnv: { LOG_LEVEL: 'info', NODE_AGENT_HEARTBEAT_INTERVAL: '200ms', NODE_AGENT_FENCE_TIMEOUT: `${options.fenceTimeoutMs}ms` },
    stopGraceMs: 5_000,
  })
  // Whatever is still placed goes, with its agent and chain (a host that cannot be reached keeps its).
  stops.push(async () => {
    const left = (await db('host_reservations').select('host_id', 'host_key')) as Array<{ host_id: string; host_key: string }>
    await Promise.all(left.map((r) => provider.destroyHost(`${r.host_id}/${r.host_key}`).catch(() => undefined)))
    for (const { netns } of hosts.values()) {
      for (const r of left) fs.rmSync(path.join(netns.rootDir, 'nodes', r.host_key), { recursive: true, force: true })
    }
  })

  const chains = staticChainSource(options.catalogue)
  const masterKey = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
  await ensureServerKeyPair(db, masterKey)
  const deps: LifecycleDeps = {
    db,
    logger: quiet,
    chains,
    masterKey,
    providers: new Map([[provider.name, provider]]),
    agentBootstrap: { gatewayTarget: target, caPem: options.files.tls.ca.toString() },
    backupStoreUrl: pathToFileURL(tempDir('nodeplane-fleet-backups-')).href,
    // Each node migrates at most once here; the cooldown does not hold back the journeys.
    migrationCooldownMs: 1,
    fenceTimeoutMs: options.fenceTimeoutMs,
    streamTokenRecheckMs: 250,
    agentReadyWaitMs: 60_000,
    commandTimeoutMs: 60_000,
    pollIntervalMs: 50,
  }
  const worker: WorkflowWorker = startLifecycleWorker(db, deps, 6)
  stops.push(() => worker.stop())

  const bus: LocalBus = createLocalBus()
  stops.push(() => bus.close())
  const relay = new OutboxRelay({ db, bus, logger: quiet, pollIntervalMs: 50 })
  relay.start()
  stops.push(() => relay.stop())
  const incidents: BusSubscription = await startIncidentConsumer({ bus, db, logger: quiet, idempotencyTtlMs: 3_600_000 })
  stops.push(() => incidents.close())

  const rpc = await startRpcGateway(
    { ...gatewaySettings(tempDir('nodeplane-fleet-rpc-')), RPC_GATEWAY_ROUTE_TTL: 5_000, HOSTS_SSH_KEY_DIR: keysDir },
    { db, logger: createLogger({ level: 'info', destination: capture(logLines) }), chains, events: { bus } },
  )
  stops.push(() => rpc.stop())

  // The health-evaluator's two jobs, each one cycle at a time and apart, as their leases keep them:
  // a probe waiting on a cut-off host does not hold back the heartbeat evaluation.
  const interval = options.evaluationIntervalMs ?? 250
  const settings = { heartbeatTimeoutMs: options.heartbeatTimeoutMs, intervalMs: interval, migrationGraceMs: options.migrationGraceMs, migrationCooldownMs: 1, migrationsPerCycle: 10 }
  const every = (ms: number, cycle: (now: Date) => Promise<unknown>) => {
    let running: Promise<unknown> | undefined
    const timer = setInterval(() => {
      running ??= cycle(new Date())
        .catch(() => undefined)
        .finally(() => {
          running = undefined
        })
    }, ms)
    stops.push(async () => {
      clearInterval(timer)
      await running
    })
  }
  every(interval, (now) => runHealthEvaluationCycle(settings, { db, logger: quiet, chains }, now))
  every(interval, (now) => probeHosts({ db, pool, keys, timeoutMs: 10_000, failuresBeforeUnreachable: DEFAULT_PROBE_FAILURES_BEFORE_UNREACHABLE }, now))

  const byId = new Map([...hosts.entries()].map(([name, h]) => [h.record.id, { name, ...h }]))
  return {
    db,
    provider,
    pool,
    rpc,
    hosts,
    logLines,
    async newNode(chain, owner) {
      const userId = owner ?? (await insertUser(db))
      const placement = resolvePlacement(getProfile(options.catalogue, chain), 'full', '1m')
      const subscriptionId = await insertSubscriptionOf(db, userId, { chain, instanceType: placement.instance_type })
      return insertNode(db, { subscription_id: subscriptionId, chain_profile_id: chain, node_type: 'full', provider: placement.provider, region: placement.region, instance_type: placement.instance_type })
    },
    untilHealthy(nodeId, timeoutMs = 90_000) {
      return waitFor(
        async () => {
          const node = await findNode(db, nodeId)
          return node?.state === 'healthy' && node.sync_status === 'synced' && node
        },
        `node ${nodeId} healthy`,
        timeoutMs,
        100,
      )
    },
    whereIs(node) {
      const { fleetHostId, hostKey } = parseHostId(node.host_id ?? '')
      const on = byId.get(fleetHostId)
      expect(on, `node ${node.id} is on no host of the fleet (${node.host_id})`).toBeDefined()
      const found = on as NonNullable<typeof on>
      return { ...found, hostKey, dir: path.join(found.netns.rootDir, 'nodes', hostKey) }
    },
    stop,
  }
}

/** The catalogue with `chain` sold on the fleet: every duration on provider ssh in the test region. */
export function onTheFleet(catalogue: ChainCatalogue, chain: string, instanceType: string): ChainCatalogue {
  const profile = getProfile(catalogue, chain)
  const durations = Object.fromEntries(Object.keys(profile.durations).map((d) => [d, { provider: 'ssh', region: FLEET_REGION, instance_type: instanceType }]))
  return { ...catalogue, profiles: new Map([...catalogue.profiles, [chain, { ...profile, durations }]]) }
}
