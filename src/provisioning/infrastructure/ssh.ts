/**
 * The `ssh` infrastructure provider (docs/infrastructure.md, "The `ssh` provider"): a node's
 * "host" is a directory and an agent on one of the fleet's registered hosts, reached over SSH.
 * Its `host_id` is `<fleet host id>/<host key>`.
 *
 * `createHost`, in order, each step safe to repeat:
 * 1. place the node (src/hosts/placement.ts): a reservation on a ready host of the region with
 *    room for the instance type's needs, found again by host key on a retry; no room waits and
 *    retries up to `placementWaitMs`, then fails with "no host with capacity in region R";
 * 2. over SSH: the node's directory `<root_dir>/nodes/<host key>/` (0700), the agent bundle
 *    `<root_dir>/agent/node-agent-<sha256>.mjs` uploaded once per content, an agent already
 *    running there stopped (a retry re-bootstraps with this attempt's token), the token (0600),
 *    the CA and the agent's environment written;
 * 3. the agent started: under systemd (`systemd-run`, `RestartPreventExitStatus=77`) when the host
 *    runs systemd and we log in as root, otherwise detached in a session of its own
 *    (`setsid nohup`) under a small restart loop that writes its pid and stops after exit 77.
 * A failure after placing removes what step 2 wrote and frees the reservation; if the host cannot
 * be reached to clean up, the reservation stays (the retry goes back to the same host).
 *
 * `destroyHost` stops the agent (and with it the chain: the whole unit, or the whole process
 * group; SIGKILL after the grace period), removes the directory, then frees the reservation.
 * `hostStatus` asks the host. The token is only ever written on the host, never logged or stored.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Db } from '../../db/knex.js'
import type { InstanceTypeNeeds } from '../../hosts/instance-types.js'
import { placeNode, releaseReservation, type Placement, type PortRange } from '../../hosts/placement.js'
import { readRemoteFile, writeRemoteFile } from '../../hosts/remote-files.js'
import type { SshKeyStore } from '../../hosts/ssh-keys.js'
import type { SshPool, SshTarget } from '../../hosts/ssh-pool.js'
import { findHostById, type Host as FleetHost } from '../../hosts/store.js'
import type { Logger } from '../../log.js'
import { packageRoot } from '../../package-root.js'
import { NonRetryableStepError } from '../../workflows/errors.js'
import type { Host, HostSpec, HostStatus, InfrastructureProvider } from './types.js'

export type AgentSupervisorMode = 'auto' | 'systemd' | 'detached'

export interface SshProviderOptions {
  db: Db
  pool: SshPool
  keys: SshKeyStore
  logger: Logger
  /** What each instance type needs on a host (HOSTS_INSTANCE_TYPES). */
  instanceTypes: Readonly<Record<string, InstanceTypeNeeds>>
  /** How long a placement waits for room before it fails (HOSTS_PLACEMENT_WAIT). */
  placementWaitMs: number
  /** How often it looks again meanwhile (HOSTS_PLACEMENT_RETRY_INTERVAL). */
  placementRetryIntervalMs: number
  /** The node-agent bundle on this machine; default this package's dist/agent/node-agent.mjs. */
  agentBundle?: string
  /** Extra environment for agents (LOG_LEVEL, release keys, test intervals). */
  agentEnv?: Record<string, string>
  /** The ports nodes' chains take on a host (HOSTS_RPC_PORTS); default 10000-19999. */
  rpcPorts?: PortRange
  /** `auto`: systemd when the host has it and we log in as root. */
  agentSupervisor?: AgentSupervisorMode
  stopGraceMs?: number
  now?: () => Date
}

/** The placement could not find room within the wait: the provisioning fails without retrying. */
export class NoHostCapacityError extends NonRetryableStepError {
  constructor(readonly region: string) {
    super(`no host with capacity in region ${region}`)
    this.name = 'NoHostCapacityError'
  }
}

const HOST_KEY = /^[A-Za-z0-9_-]{1,150}$/
const FLEET_HOST_ID = /^([0-9a-f-]{36})\/([A-Za-z0-9_-]{1,150})$/

/** Environment values are single-quoted into a file a shell and systemd both read. */
const ENV_VALUE = /^[^'\n\r\0]*$/

export function defaultAgentBundle(): string {
  return path.join(packageRoot(), 'dist', 'agent', 'node-agent.mjs')
}

export class SshInfrastructureProvider implements InfrastructureProvider {
  readonly name = 'ssh'
  private bundle: { path: string; mtimeMs: number; sha256: string; bytes: Buffer } | undefined

  constructor(private readonly options: SshProviderOptions) {}

  async createHost(spec: HostSpec): Promise<Host> {
    const hostKey = spec.hostKey.replace(/[^A-Za-z0-9_-]/g, '_')
    if (!HOST_KEY.test(hostKey)) throw new NonRetryableStepError(`host key "${spec.hostKey.slice(0, 60)}" is too long for the ssh provider`)
    const needs = this.options.instanceTypes[spec.instanceType]
    if (!needs) {
      throw new NonRetryableStepError(
        `instance type ${spec.instanceType} states no needs for the ssh provider (known: ${Object.keys(this.options.instanceTypes).join(', ')}; add it to HOSTS_INSTANCE_TYPES)`,
      )
    }
    const placement = await this.place(spec, hostKey, needs)
    const host = placement.host
    const target = await this.target(host)
    const dir = nodeDir(host, hostKey)
    const log = { node_id: spec.nodeId, host: host.name, host_key: hostKey }
    try {
      await this.install(target, host, dir, hostKey, spec, placement.reservation.rpc_port)
    } catch (err) {
      this.options.logger.warn({ ...log, err: (err as Error).message }, 'ssh host: bootstrapping the agent failed; removing what was written')
      try {
        await this.remove(target, dir, hostKey)
        await releaseReservation(this.options.db, placement.reservation.host_key)
      } catch (cleanup) {
        // Left reserved: the retry comes back to this host and finishes or cleans up there.
        this.options.logger.warn({ ...log, err: (cleanup as Error).message }, 'ssh host: could not clean up; the reservation is kept')
      }
      throw err
    }
    this.options.logger.info({ ...log, rpc_port: placement.reservation.rpc_port }, 'ssh host created')
    return { host_id: `${host.id}/${hostKey}`, host_ip: host.address, provider: this.name, instance_type: spec.instanceType, region: host.region }
  }

  async destroyHost(hostId: string): Promise<void> {
    const { fleetHostId, hostKey } = parseHostId(hostId)
    const host = await findHostById(this.options.db, fleetHostId)
    // A removed host had no node left on it and its key is gone: nothing to reach.
    if (host && host.state !== 'removed') await this.remove(await this.target(host), nodeDir(host, hostKey), hostKey)
    await releaseReservation(this.options.db, hostKey)
    this.options.logger.info({ host_id: hostId }, 'ssh host destroyed')
  }

  async hostStatus(hostId: string): Promise<HostStatus> {
    const { fleetHostId, hostKey } = parseHostId(hostId)
    const host = await findHostById(this.options.db, fleetHostId)
    if (!host || host.state === 'removed') return 'missing'
    const dir = nodeDir(host, hostKey)
    const result = await this.options.pool.exec(await this.target(host), statusScript(dir, unitName(hostKey)))
    const answer = result.stdout.trim()
    if (answer === 'missing' || answer === 'running' || answer === 'stopped') return answer
    throw new Error(`could not read the status of ${hostId} on ${host.name}: ${result.stderr.trim() || `exit ${result.code ?? result.signal}`}`)
  }

  /**
   * Reserves room for a node on a host now, without waiting and without touching any host;
   * undefined when no ready host of the region has room. `createHost` with the same host key
   * takes this placement: a drain reserves a node's room before it starts the node's migration.
   */
  async reserve(request: { nodeId: string; hostKey: string; region: string; instanceType: string }): Promise<Placement | undefined> {
    const needs = this.options.instanceTypes[request.instanceType]
    if (!needs) throw new Error(`instance type ${request.instanceType} states no needs for the ssh provider (add it to HOSTS_INSTANCE_TYPES)`)
    const hostKey = request.hostKey.replace(/[^A-Za-z0-9_-]/g, '_')
    const now = (this.options.now ?? (() => new Date()))()
    return placeNode(this.options.db, { ...request, hostKey, needs, ...(this.options.rpcPorts ? { rpcPorts: this.options.rpcPorts } : {}) }, now)
  }

  /** The node's placement, waiting for room up to the configured time. */
  private async place(spec: HostSpec, hostKey: string, needs: InstanceTypeNeeds): Promise<Placement> {
    const now = this.options.now ?? (() => new Date())
    const deadline = now().getTime() + this.options.placementWaitMs
    for (let waited = false; ; waited = true) {
      const placement = await placeNode(
        this.options.db,
        { hostKey, nodeId: spec.nodeId, region: spec.region, instanceType: spec.instanceType, needs, ...(this.options.rpcPorts ? { rpcPorts: this.options.rpcPorts } : {}) },
        now(),
      )
      if (placement) return placement
      if (now().getTime() >= deadline) {
        this.options.logger.error({ node_id: spec.nodeId, region: spec.region, instance_type: spec.instanceType }, 'no host with capacity for the node')
        throw new NoHostCapacityError(spec.region)
      }
      if (!waited) this.options.logger.warn({ node_id: spec.nodeId, region: spec.region, instance_type: spec.instanceType }, 'no host with capacity now; waiting for room')
      await new Promise((resolve) => setTimeout(resolve, Math.min(this.options.placementRetryIntervalMs, Math.max(0, deadline - now().getTime()))))
    }
  }

  private target(host: FleetHost): Promise<SshTarget> {
    return sshTargetOf(host, this.options.keys)
  }

  private async install(target: SshTarget, host: FleetHost, dir: string, hostKey: string, spec: HostSpec, rpcPort: number): Promise<void> {
    const { pool } = this.options
    const bundle = this.readBundle()
    const bundleFile = `${host.root_dir}/agent/node-agent-${bundle.sha256.slice(0, 16)}.mjs`
    const prepared = await pool.exec(
      target,
      [
        `mkdir -p '${host.root_dir}/agent' && mkdir -p -m 0700 '${dir}' '${dir}/state' || exit 1`,
        `if [ -f '${bundleFile}' ] && [ "$(sha256sum '${bundleFile}' | cut -d' ' -f1)" = '${bundle.sha256}' ]; then echo bundle=present; else echo bundle=absent; fi`,
        `if [ "$(id -u)" = 0 ] && [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then echo systemd=yes; else echo systemd=no; fi`,
        'echo "node=$(command -v node)"',
      ].join('\n'),
    )
    if (prepared.code !== 0) throw new Error(`could not prepare ${dir} on ${host.name}: ${prepared.stderr.trim() || `exit ${prepared.code}`}`)
    const facts = new Map(prepared.stdout.split('\n').map((line) => line.trim().split('=') as [string, string]))
    const nodeBin = facts.get('node') ?? ''
    if (!/^\/[A-Za-z0-9._/-]+$/.test(nodeBin)) throw new Error(`Node.js is not on the PATH of ${host.user}'s SSH login on ${host.name}`)
    if (facts.get('bundle') !== 'present') await writeRemoteFile(pool, target, bundleFile, bundle.bytes, 0o644, 120_000)

    // Same key again (a retried step): the agent there is stopped and started with this token.
    // Its predecessor may have been refused meanwhile (this attempt's token replaced its own) and
    // marked the directory superseded; with the new token this directory is the node's again.
    await this.stopAgent(target, dir, hostKey)
    const cleared = await pool.exec(target, `rm -f '${dir}/state/superseded.json'`)
    if (cleared.code !== 0) throw new Error(`could not reset ${dir} on ${host.name}: ${cleared.stderr.trim() || `exit ${cleared.code}`}`)
    const mode = this.options.agentSupervisor === 'systemd' || (this.options.agentSupervisor !== 'detached' && facts.get('systemd') === 'yes') ? 'systemd' : 'detached'
    await writeRemoteFile(pool, target, `${dir}/agent-token`, spec.agent.token, 0o600)
    await writeRemoteFile(pool, target, `${dir}/gateway-ca.pem`, spec.agent.caPem, 0o644)
    await writeRemoteFile(pool, target, `${dir}/agent.env`, agentEnvFile(this.options.agentEnv ?? {}, spec, dir, rpcPort), 0o600)
    await writeRemoteFile(pool, target, `${dir}/supervisor`, `${mode}\n`, 0o600)
    await writeRemoteFile(pool, target, `${dir}/run-agent.sh`, runScript(nodeBin, bundleFile), 0o700)
    const started = await pool.exec(target, mode === 'systemd' ? systemdStart(dir, unitName(hostKey), nodeBin, bundleFile) : detachedStart(dir))
    if (started.code !== 0) throw new Error(`the agent on ${host.name} did not start: ${(started.stderr.trim() || started.stdout.trim()).slice(0, 500) || `exit ${started.code}`}`)
  }

  private async stopAgent(target: SshTarget, dir: string, hostKey: string): Promise<void> {
    const graceSeconds = Math.ceil((this.options.stopGraceMs ?? 15_000) / 1000)
    const result = await this.options.pool.exec(target, stopScript(dir, unitName(hostKey), graceSeconds), { timeoutMs: graceSeconds * 1000 + 30_000 })
    if (result.code !== 0) throw new Error(`could not stop the agent in ${dir}: ${result.stderr.trim() || `exit ${result.code ?? result.signal}`}`)
  }

  /** Stops the agent and its chain, then removes the node's directory. */
  private async remove(target: SshTarget, dir: string, hostKey: string): Promise<void> {
    await this.stopAgent(target, dir, hostKey)
    const result = await this.options.pool.exec(target, `rm -rf '${dir}'`)
    if (result.code !== 0) throw new Error(`could not remove ${dir}: ${result.stderr.trim() || `exit ${result.code ?? result.signal}`}`)
  }

  private readBundle(): { sha256: string; bytes: Buffer } {
    const file = this.options.agentBundle ?? defaultAgentBundle()
    let stat: fs.Stats
    try {
      stat = fs.statSync(file)
    } catch {
      throw new NonRetryableStepError(`the node-agent bundle ${file} does not exist (npm run build makes it)`)
    }
    if (!this.bundle || this.bundle.path !== file || this.bundle.mtimeMs !== stat.mtimeMs) {
      const bytes = fs.readFileSync(file)
      this.bundle = { path: file, mtimeMs: stat.mtimeMs, bytes, sha256: crypto.createHash('sha256').update(bytes).digest('hex') }
    }
    return this.bundle
  }
}

/**
 * A small file of a node's directory on its fleet host, read over SSH (the rpc-gateway reads a
 * bitcoin-style chain's RPC cookie from `state/`): `relativePath` is under the node's directory.
 */
export async function readFleetNodeFile(
  deps: { db: Db; pool: SshPool; keys: SshKeyStore },
  hostId: string,
  relativePath: string,
  maxBytes: number,
): Promise<string> {
  const { fleetHostId, hostKey } = parseHostId(hostId)
  const host = await findHostById(deps.db, fleetHostId)
  if (!host || host.state === 'removed') throw new Error(`fleet host ${fleetHostId} of ${hostId} is gone`)
  return readRemoteFile(deps.pool, await sshTargetOf(host, deps.keys), `${nodeDir(host, hostKey)}/${relativePath}`, maxBytes)
}

async function sshTargetOf(host: FleetHost, keys: SshKeyStore): Promise<SshTarget> {
  return { id: host.id, address: host.address, port: host.port, user: host.user, privateKey: await keys.get(host.id), hostKeyFingerprint: host.host_key_fingerprint }
}

export function parseHostId(hostId: string): { fleetHostId: string; hostKey: string } {
  const match = FLEET_HOST_ID.exec(hostId)
  if (!match) throw new Error(`"${hostId.slice(0, 80)}" is not an ssh host id (<fleet host id>/<host key>)`)
  return { fleetHostId: match[1] as string, hostKey: match[2] as string }
}

function nodeDir(host: FleetHost, hostKey: string): string {
  return `${host.root_dir.replace(/\/+$/, '')}/nodes/${hostKey}`
}

function unitName(hostKey: string): string {
  return `nodeplane-agent-${hostKey}`
}

function agentEnvFile(extra: Record<string, string>, spec: HostSpec, dir: string, rpcPort: number): string {
  const env: Record<string, string> = {
    ...extra,
    AGENT_GATEWAY_URL: spec.agent.gatewayTarget,
    AGENT_GATEWAY_CA_FILE: `${dir}/gateway-ca.pem`,
    ...(spec.agent.serverName ? { AGENT_GATEWAY_SERVER_NAME: spec.agent.serverName } : {}),
    NODE_AGENT_NODE_ID: spec.nodeId,
    NODE_AGENT_TOKEN_FILE: `${dir}/agent-token`,
    NODE_AGENT_STATE_DIR: `${dir}/state`,
    // For a person reading the host: the port the control plane gave this node's chain.
    NODEPLANE_RPC_PORT: String(rpcPort),
  }
  return `${Object.entries(env)
    .map(([k, v]) => {
      if (!/^[A-Z][A-Z0-9_]*$/.test(k) || !ENV_VALUE.test(v)) throw new Error(`agent environment ${k} cannot be written safely`)
      return `${k}='${v}'`
    })
    .join('\n')}\n`
}

/**
 * The detached agent's supervision: restart after a crash (5 s apart), never after exit 77 (the
 * gateway refused the token: a restart cannot fix that). A stop signals the whole process group,
 * this loop included.
 */
function runScript(nodeBin: string, bundleFile: string): string {
  return [
    '#!/bin/sh',
    '# nodeplane node agent (written by the control plane; see docs/infrastructure.md)',
    'cd "$(dirname "$0")" || exit 1',
    'echo $$ > agent.pid',
    'set -a; . ./agent.env; set +a',
    'while :; do',
    `  '${nodeBin}' '${bundleFile}' daemon node-agent`,
    '  code=$?',
    '  [ "$code" = 77 ] && exit 77',
    '  sleep 5',
    'done',
    '',
  ].join('\n')
}

function detachedStart(dir: string): string {
  return [
    `cd '${dir}' || exit 1`,
    'rm -f agent.pid',
    // A session of its own: closing the SSH connection does not hang it up, and the whole
    // process group (loop, agent, chain) is stopped together.
    'setsid nohup sh ./run-agent.sh >> agent.log 2>&1 < /dev/null &',
    'i=0; while [ ! -s agent.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done',
    '[ -s agent.pid ] || { echo "the agent did not start (see agent.log)" >&2; exit 1; }',
  ].join('\n')
}

function systemdStart(dir: string, unit: string, nodeBin: string, bundleFile: string): string {
  return [
    `systemctl stop '${unit}' 2>/dev/null; systemctl reset-failed '${unit}' 2>/dev/null`,
    `systemd-run --unit='${unit}' --collect -p Restart=on-failure -p RestartSec=5 -p RestartPreventExitStatus=77 -p KillMode=control-group -p TimeoutStopSec=20 \\`,
    `  -p EnvironmentFile='${dir}/agent.env' -p WorkingDirectory='${dir}' -p StandardOutput='append:${dir}/agent.log' -p StandardError='append:${dir}/agent.log' \\`,
    `  '${nodeBin}' '${bundleFile}' daemon node-agent`,
  ].join('\n')
}

/** Stops whatever runs the node: its systemd unit, or the detached loop's whole process group. */
function stopScript(dir: string, unit: string, graceSeconds: number): string {
  return [
    `if [ -f '${dir}/supervisor' ] && grep -q systemd '${dir}/supervisor'; then systemctl stop '${unit}' 2>/dev/null; systemctl reset-failed '${unit}' 2>/dev/null; exit 0; fi`,
    `p=$(cat '${dir}/agent.pid' 2>/dev/null)`,
    `case "$p" in ''|*[!0-9]*) exit 0;; esac`,
    // Only the loop this directory started (a pid reused after a reboot is someone else's).
    `cd '${dir}' && grep -q run-agent.sh "/proc/$p/cmdline" 2>/dev/null && [ "$(readlink "/proc/$p/cwd")" = "$(pwd -P)" ] || exit 0`,
    'kill -TERM -- "-$p" 2>/dev/null',
    `i=0; while kill -0 -- "-$p" 2>/dev/null && [ $i -lt ${graceSeconds * 20} ]; do sleep 0.05; i=$((i+1)); done`,
    'kill -KILL -- "-$p" 2>/dev/null',
    'i=0; while kill -0 -- "-$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done',
    'exit 0',
  ].join('\n')
}

function statusScript(dir: string, unit: string): string {
  return [
    `[ -d '${dir}' ] || { echo missing; exit 0; }`,
    `if [ -f '${dir}/supervisor' ] && grep -q systemd '${dir}/supervisor'; then systemctl is-active --quiet '${unit}' && echo running || echo stopped; exit 0; fi`,
    `p=$(cat '${dir}/agent.pid' 2>/dev/null)`,
    `case "$p" in ''|*[!0-9]*) echo stopped; exit 0;; esac`,
    `cd '${dir}' && if grep -q run-agent.sh "/proc/$p/cmdline" 2>/dev/null && [ "$(readlink "/proc/$p/cwd")" = "$(pwd -P)" ]; then echo running; else echo stopped; fi`,
  ].join('\n')
}
