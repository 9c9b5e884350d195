/**
 * What a heartbeat says about the host: the supervisor's process state and the probe's view of
 * the chain (sync status and application metrics). The probe follows the active deployment, so
 * an upgrade that changes the probe is picked up on the next heartbeat.
 */
import type { ProbeSpec } from '../agents/protocol.js'
import type { AgentHost, HostSnapshot } from './client.js'
import { createProbe, type Probe } from './probes/index.js'
import type { StateDir } from './state-dir.js'
import type { ChainSupervisor } from './supervisor.js'

export class HostReporter implements AgentHost {
  private probe: Probe | undefined
  private probeKey = ''
  /** A stall is counted across checks, so the probe instance lives as long as its spec. */
  constructor(
    private readonly stateDir: StateDir,
    private readonly supervisor: ChainSupervisor,
  ) {}

  async snapshot(): Promise<HostSnapshot> {
    const status = this.supervisor.status()
    const deployment = this.supervisor.deployment
    const base = { binary_version: deployment?.version ?? '', process_state: status.process_state, restarts_in_window: status.restarts_in_window }
    if (status.process_state !== 'running' || !deployment?.probe) return { ...base, sync_status: 'unknown', metrics: {} }
    const report = await this.probeFor(deployment.probe).check()
    return { ...base, sync_status: report.sync_status, metrics: report.metrics }
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
