/**
 * The `local` infrastructure provider: a host is a directory under the data dir plus a detached
 * node agent process (the one-file agent, `dist/agent/node-agent.mjs`), tracked by pid.
 * Destroying a host stops the agent's whole process group (the agent and the chain process it
 * supervises) and removes the directory.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import type { Logger } from '../../log.js'
import { isNodeAgentProcess as isAlive, readAgentPid } from '../../node-agent/lock.js'
import { packageRoot } from '../../package-root.js'
import { NonRetryableStepError } from '../../workflows/errors.js'
import type { Host, HostSpec, HostStatus, InfrastructureProvider } from './types.js'

export interface LocalProviderOptions {
  /** Where host directories live, e.g. `<data dir>/hosts`. */
  root: string
  logger: Logger
  /**
   * The agent program; default: this package's one-file agent (`dist/agent/node-agent.mjs`, what
   * the `ssh` provider uploads) on this Node: it starts on about 0.2 CPU seconds less than the
   * whole CLI (`bin/run.js daemon node-agent`, the same agent behind oclif and every command's code).
   */
  agentCommand?: readonly string[]
  /** Extra environment for agents (LOG_LEVEL, test intervals). */
  agentEnv?: Record<string, string>
  stopGraceMs?: number
}

const hostRecord = z.object({
  host_id: z.string(),
  node_id: z.string().uuid(),
  pid: z.number().int().positive(),
  region: z.string(),
  instance_type: z.string(),
  created_at: z.string(),
})
type HostRecord = z.infer<typeof hostRecord>

const HOST_ID = /^local-[A-Za-z0-9_-]{1,100}$/

export class LocalInfrastructureProvider implements InfrastructureProvider {
  readonly name = 'local'

  constructor(private readonly options: LocalProviderOptions) {
    fs.mkdirSync(options.root, { recursive: true, mode: 0o700 })
  }

  hostDir(hostId: string): string {
    if (!HOST_ID.test(hostId)) throw new Error(`"${hostId.slice(0, 60)}" is not a local host id`)
    return path.join(this.options.root, hostId)
  }

  async createHost(spec: HostSpec): Promise<Host> {
    const hostId = `local-${spec.hostKey.replace(/[^A-Za-z0-9_-]/g, '_')}`
    const dir = this.hostDir(hostId)
    // Same key again (a retried step): the same host, re-bootstrapped with this token — the
    // previous attempt's token was replaced when this one was created.
    await this.stopAgents(hostId)
    // The previous agent may have been refused meanwhile (this attempt's token replaced its own)
    // and marked the directory superseded; with the new token it is the node's again.
    fs.rmSync(path.join(dir, 'state', 'superseded.json'), { force: true })

    fs.mkdirSync(path.join(dir, 'state'), { recursive: true, mode: 0o700 })
    const tokenFile = path.join(dir, 'agent-token')
    writePrivate(tokenFile, spec.agent.token)
    const caFile = path.join(dir, 'gateway-ca.pem')
    fs.writeFileSync(caFile, spec.agent.caPem, { mode: 0o644 })
    // The agent writes its log straight into the file through a descriptor of its own: piped
    // through this process (execa's file target), its output, and with it every write the agent
    // makes to stdout, would die with the orchestrator that created the host.
    const log = fs.openSync(path.join(dir, 'agent.log'), 'a', 0o600)
    const bundle = path.join(packageRoot(), 'dist', 'agent', 'node-agent.mjs')
    // Missing, the agent would exit at once into agent.log and the step wait out AGENT_READY_WAIT.
    if (!this.options.agentCommand && !fs.existsSync(bundle)) throw new NonRetryableStepError(`the node agent ${bundle} does not exist: build it with \`npm run build\``)
    const [command, ...args] = this.options.agentCommand ?? [process.execPath, bundle, 'daemon', 'node-agent']
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      ...this.options.agentEnv,
      AGENT_GATEWAY_URL: spec.agent.gatewayTarget,
      AGENT_GATEWAY_CA_FILE: caFile,
      ...(spec.agent.serverName ? { AGENT_GATEWAY_SERVER_NAME: spec.agent.serverName } : {}),
      NODE_AGENT_NODE_ID: spec.nodeId,
      NODE_AGENT_TOKEN_FILE: tokenFile,
      NODE_AGENT_STATE_DIR: path.join(dir, 'state'),
    }
    {
      let child: ChildProcess
      try {
        child = spawn(command as string, args, { cwd: dir, env, detached: true, stdio: ['ignore', log, log] })
      } finally {
        fs.closeSync(log)
      }
      // The agent outlives this process; its exit is observed through hostStatus, not here.
      child.on('error', () => undefined)
      child.unref()
      if (!child.pid) throw new Error('the agent process did not start')
      const record: HostRecord = {
        host_id: hostId,
        node_id: spec.nodeId,
        pid: child.pid,
        region: spec.region,
        instance_type: spec.instanceType,
        created_at: new Date().toISOString(),
      }
      writePrivate(path.join(dir, 'host.json'), JSON.stringify(record, null, 2))
      this.options.logger.info({ host_id: hostId, node_id: spec.nodeId, pid: child.pid }, 'local host created')
      return this.toHost(record)
    }
  }

  async destroyHost(hostId: string): Promise<void> {
    const dir = this.hostDir(hostId)
    await this.stopAgents(hostId)
    fs.rmSync(dir, { recursive: true, force: true })
    this.options.logger.info({ host_id: hostId }, 'local host destroyed')
  }

  async hostStatus(hostId: string): Promise<HostStatus> {
    if (!fs.existsSync(this.hostDir(hostId))) return 'missing'
    return this.agentPids(hostId).some(isAlive) ? 'running' : 'stopped'
  }

  /** The hosts whose agent still runs: what `nodeplane up` leaves running when it stops. */
  runningHosts(): Array<{ host_id: string; node_id: string; pid: number }> {
    const running: Array<{ host_id: string; node_id: string; pid: number }> = []
    for (const entry of fs.readdirSync(this.options.root, { withFileTypes: true })) {
      if (!entry.isDirectory() || !HOST_ID.test(entry.name)) continue
      const record = this.readRecord(entry.name)
      const pid = this.agentPids(entry.name).find(isAlive)
      if (record && pid !== undefined) running.push({ host_id: record.host_id, node_id: record.node_id, pid })
    }
    return running.sort((a, b) => a.host_id.localeCompare(b.host_id))
  }

  /** Stops the host's agent and its chain (their process group); the directory, with the chain's data, stays. */
  async stopHost(hostId: string): Promise<void> {
    await this.stopAgents(hostId)
    this.options.logger.info({ host_id: hostId }, 'local host stopped')
  }

  /**
   * Every agent that may run on the host: the one recorded in host.json and the one that wrote
   * `state/agent.pid` (an agent started by a creator killed before it could record the pid).
   */
  private async stopAgents(hostId: string): Promise<void> {
    for (const pid of this.agentPids(hostId)) if (isAlive(pid)) await this.stopGroup(pid)
  }

  private agentPids(hostId: string): number[] {
    const pids = new Set<number>()
    const record = this.readRecord(hostId)
    if (record) pids.add(record.pid)
    const own = readAgentPid(path.join(this.hostDir(hostId), 'state'))
    if (own !== undefined) pids.add(own)
    return [...pids]
  }

  private async stopGroup(pid: number): Promise<void> {
    signalGroup(pid, 'SIGTERM')
    const deadline = Date.now() + (this.options.stopGraceMs ?? 15_000)
    while (isAlive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
    if (isAlive(pid)) {
      this.options.logger.warn({ pid }, 'agent did not stop in time; killing its process group')
      signalGroup(pid, 'SIGKILL')
      while (isAlive(pid)) await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }

  private readRecord(hostId: string): HostRecord | undefined {
    const file = path.join(this.hostDir(hostId), 'host.json')
    if (!fs.existsSync(file)) return undefined
    const parsed = hostRecord.safeParse(JSON.parse(fs.readFileSync(file, 'utf8')))
    return parsed.success ? parsed.data : undefined
  }

  private toHost(record: HostRecord): Host {
    return { host_id: record.host_id, host_ip: '127.0.0.1', provider: this.name, instance_type: record.instance_type, region: record.region }
  }
}

function writePrivate(file: string, content: string): void {
  const tmp = `${file}.tmp`
  fs.rmSync(tmp, { force: true })
  fs.writeFileSync(tmp, content, { mode: 0o600 })
  fs.renameSync(tmp, file)
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal)
  } catch {
    try {
      process.kill(pid, signal)
    } catch {
      // already gone
    }
  }
}
