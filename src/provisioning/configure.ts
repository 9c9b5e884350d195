/**
 * The `configure` step the provision and migrate workflows share: the chain profile rendered for
 * one node on one host, sent to its agent, and the versions it reports recorded.
 */
import net from 'node:net'
import { DEFAULT_RPC_HOST, getProfile, isBindableRpcHost, renderNodeConfig, type ChainProfile, type NodeConfigInput, type NodeConfiguration } from '../config/chains.js'
import { fromJson } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { reservationOnHost, type Reservation } from '../hosts/placement.js'
import { renderConfigChanges, type ConfigChanges, type RolloutManifestData } from '../rollouts/manifests.js'
import { NonRetryableStepError } from '../workflows/errors.js'
import { runAgentCommand } from './agent-calls.js'
import type { LifecycleDeps } from './deps.js'

export interface ConfigureTarget {
  nodeId: string
  chainProfileId: string
  nodeType: string
  /** The provider of the host being configured: a `local` host gets a free port on this machine. */
  provider: string
  /** The host being configured (the provider's host id): a provisioning's or migration's new host. */
  hostId: string
  /** The release to run; default the profile's default version. */
  version?: string
  /** The config changes the rollout that installed `version` made (installedConfigChanges); none: the profile's own. */
  configChanges?: ConfigChanges | null
}

export interface ConfigureResult {
  binary_version: string
  config_version: string | null
}

export async function renderConfiguration(deps: LifecycleDeps, target: ConfigureTarget): Promise<NodeConfiguration> {
  const profile = getProfile(deps.chains.current(), target.chainProfileId)
  // Local hosts share one machine, so each chain needs its own port; a fleet host's nodes share
  // that host, so each has the port its placement reserved there; a cloud host has its own.
  const rpcPort = target.provider === 'local' ? await freePort() : target.provider === 'ssh' ? await reservedRpcPort(deps.db, target.nodeId, target.hostId) : 8545
  const rpcHost = await rpcHostOf(deps.db, target.nodeId, target.hostId)
  return renderInstalledConfiguration(
    profile,
    target.nodeType,
    { rpc_port: rpcPort, rpc_host: rpcHost, node_id: target.nodeId, ...(target.version ? { version: target.version } : {}) },
    target.configChanges ?? null,
  )
}

/**
 * The configuration a node runs at a version: the chain profile's templates, with on top the
 * config changes of the rollout that installed that version (files, run, config_version).
 */
export function renderInstalledConfiguration(profile: ChainProfile, nodeType: string, input: NodeConfigInput, changes: ConfigChanges | null): NodeConfiguration {
  const base = renderNodeConfig(profile, nodeType, input)
  if (!changes) return base
  const changed = renderConfigChanges(profile, nodeType, base.artifact.version, changes, { rpc_port: input.rpc_port, node_id: input.node_id, ...(input.rpc_host ? { rpc_host: input.rpc_host } : {}) })
  return {
    ...base,
    ...(changed.config_files ? { files: changed.config_files } : {}),
    ...(changed.run ? { run: changed.run } : {}),
    ...(changed.config_version !== undefined ? { config_version: changed.config_version } : {}),
  }
}

/**
 * The config changes of the rollout that installed `version` on the node: its latest upgrade to
 * that version that succeeded (a node rolled back is `rolled_back`, not `succeeded`), other than
 * `exceptRolloutId`. Null when the profile's own configuration is what that version runs.
 */
export async function installedConfigChanges(db: Queryable, nodeId: string, version: string, exceptRolloutId?: string): Promise<ConfigChanges | null> {
  const row = (await db('rollout_nodes')
    .join('rollouts', 'rollouts.id', 'rollout_nodes.rollout_id')
    .where({ 'rollout_nodes.node_id': nodeId, 'rollout_nodes.status': 'succeeded', 'rollouts.target_version': version })
    .modify((q) => {
      if (exceptRolloutId) void q.whereNot('rollouts.id', exceptRolloutId)
    })
    .orderBy('rollout_nodes.completed_at', 'desc')
    .first('rollouts.manifest')) as { manifest: unknown } | undefined
  if (!row || row.manifest === null || row.manifest === undefined) return null
  return fromJson<RolloutManifestData>(row.manifest).config_changes ?? null
}

/** Sends `configure` (idempotent by `commandKey`) and writes the node's binary and config versions. */
export async function configureNode(deps: LifecycleDeps, target: ConfigureTarget, commandKey: string, heartbeat?: () => void): Promise<ConfigureResult> {
  const payload = await renderConfiguration(deps, target)
  const result = (await runAgentCommand(deps, { nodeId: target.nodeId, type: 'configure', payload, key: commandKey }, heartbeat)) as ConfigureResult
  await writeConfigState(deps.db, target.nodeId, result.binary_version, result.config_version)
  return result
}

/** The RPC port the node's placement on fleet host `hostId` reserved. */
async function reservedRpcPort(db: Queryable, nodeId: string, hostId: string): Promise<number> {
  const reservation = await reservationOnHost(db, nodeId, hostId)
  if (!reservation) throw new Error(`node ${nodeId} has no placement on fleet host ${hostId}`)
  return reservation.rpc_port
}

/** The node's placement on `hostId`, by default on the host it runs on (nodes.host_id); none off the fleet. */
async function placementOf(db: Queryable, nodeId: string, hostId?: string): Promise<Reservation | undefined> {
  const on = hostId ?? ((await db('nodes').where({ id: nodeId }).first('host_id')) as { host_id: string | null } | undefined)?.host_id
  return on ? reservationOnHost(db, nodeId, on) : undefined
}

/**
 * The address the node's chain binds its RPC to (docs/infrastructure.md, "Where a fleet node
 * listens"): on a fleet host, the private address the host was added with, so the rpc-gateways
 * reach it; anywhere else loopback. The host is the one the node runs on, or `hostId` when a
 * provisioning or migration configures a new one.
 */
export async function rpcHostOf(db: Queryable, nodeId: string, hostId?: string): Promise<string> {
  const reservation = await placementOf(db, nodeId, hostId)
  if (!reservation) return DEFAULT_RPC_HOST
  const host = (await db('hosts').where({ id: reservation.host_id }).first('name', 'address')) as { name: string; address: string } | undefined
  if (!host) throw new Error(`node ${nodeId} is placed on a fleet host that no longer exists (${reservation.host_id})`)
  if (!isBindableRpcHost(host.address)) {
    throw new NonRetryableStepError(`fleet host ${host.name}'s address ${host.address} is not a private IPv4 address: a chain binds its RPC to the host's private address, never a public one (add the host with --address <private IPv4>)`)
  }
  return host.address
}

/**
 * Local chains' RPC ports, below the kernel's ephemeral range (32768 up on Linux): a chain binds
 * its port again on every restart and upgrade, and a port of that range left free in between can
 * be taken by the local end of any outgoing connection on the machine. A random pick, checked
 * free, keeps two nodes configured at the same moment apart.
 */
export const LOCAL_RPC_PORTS = { first: 10_000, last: 19_999 } as const

export async function freePort(): Promise<number> {
  const size = LOCAL_RPC_PORTS.last - LOCAL_RPC_PORTS.first + 1
  const start = Math.floor(Math.random() * size)
  for (let i = 0; i < 100; i += 1) {
    const port = LOCAL_RPC_PORTS.first + ((start + i * 7919) % size)
    if (await bindable(port)) return port
  }
  throw new Error(`no free port for a local chain in ${LOCAL_RPC_PORTS.first}-${LOCAL_RPC_PORTS.last}`)
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** Spec: binary_version is written after the first configuration (and after an upgrade). */
export async function writeConfigState(db: Queryable, nodeId: string, binaryVersion: string, configVersion: string | null): Promise<void> {
  await db('node_config_state')
    .insert({ node_id: nodeId, binary_version: binaryVersion, config_version: configVersion, updated_at: new Date() })
    .onConflict('node_id')
    .merge(['binary_version', 'config_version', 'updated_at'])
}
