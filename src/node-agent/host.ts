/**
 * What a heartbeat says about the host: the supervisor's process state and the probe's view of
 * the chain (sync status and application metrics). The probe follows the active deployment, so
 * an upgrade that changes the probe is picked up on the next heartbeat.
 *
 * A chain takes a while to open its RPC port after it starts: until its first answer, within the
 * probe's start-up grace, a running process is reported `starting`, so the control plane does not
 * judge (and raise an incident over) a node that is still coming up. Each new process (a start, a
 * restart after a crash, an upgrade) begins a new grace.
 */
import type { ProbeSpec } from '../agent-gateway/protocol.js'
import type { AgentHost, HostSnapshot } from './client.js'
import { createProbe, type Probe } from './probes/index.js'
import type { StateDir } from './state-dir.js'
import type { ChainSupervisor } from './supervisor.js'

const DEFAULT_STARTUP_GRACE_MS = 60_000

export class HostReporter implements AgentHost {
  private probe: Probe | undefined
  private probeKey = ''
  /** The process the start-up grace is counted for, when it began, and whether it has answered. */
  private startup: { pid: number | undefined; since: number; answered: boolean } | undefined

  /** A stall is counted across checks, so the probe instance lives as long as its spec. */
  constructor(
    private readonly stateDir: StateDir,
    private readonly supervisor: ChainSupervisor,
    private readonly now: () => number = Date.now,
  ) {}

  async snapshot(): Promise<HostSnapshot> {
    const status = this.supervisor.status()
    const deployment = this.supervisor.deployment
    const base = { binary_version: deployment?.version ?? '', process_state: status.process_state, restarts_in_window: status.restarts_in_window, chain_pid: status.pid }
    if (status.process_state !== 'running' || !deployment?.probe) {
      // Between a crash and its restart the state stays `running` with no pid: the grace is kept.
      if (status.process_state !== 'running') this.startup = undefined
      return { ...base, sync_status: 'unknown', metrics: {} }
    }
    if (!this.startup || (status.pid !== undefined && status.pid !== this.startup.pid)) this.startup = { pid: status.pid, since: this.now(), answered: false }
    const report = await this.probeFor(deployment.probe).check()
    const after = this.supervisor.status()
    if (after.process_state !== 'running' || after.pid !== status.pid) {
      // The process was stopped or replaced while it was probed (a restart, an upgrade): the answer
      // describes the one before. Report the process as it is now, with nothing measured yet.
      if (after.process_state !== 'running') this.startup = undefined
      else this.startup = { pid: after.pid, since: this.now(), answered: false }
      return { ...base, process_state: after.process_state === 'running' ? 'starting' : after.process_state, restarts_in_window: after.restarts_in_window, chain_pid: after.pid, sync_status: 'unknown', metrics: {} }
    }
    if (report.healthy) this.startup.answered = true
    const grace = deployment.probe.startup_grace_ms ?? DEFAULT_STARTUP_GRACE_MS
    const starting = !this.startup.answered && this.now() - this.startup.since < grace
    return { ...base, process_state: starting ? 'starting' : 'running', sync_status: report.sync_status, metrics: report.metrics }
  }

  private probeFor(spec: ProbeSpec): Probe {
    const key = JSON.stringify(spec)
    if (!this.probe || key !== this.probeKey) {
      this.probe = createProbe(spec, { cwd: this.stateDir.root })
      this.probeKey = key
    }
    return this.probe
  }
}
