/**
 * The hosts' health probe (docs/infrastructure.md, "Health probe"): every HOSTS_PROBE_INTERVAL,
 * on whichever replica holds the `host-probe` lease, each host not removed is asked `true` over
 * SSH (through the pool: an open connection is reused, a dead one reopened). A `ready` host that
 * fails `failuresBeforeUnreachable` probes in a row becomes `unreachable` (one slow handshake on a
 * busy host is no outage), at once when it presents another host key (never a probe to wait out);
 * an `unreachable` host that answers becomes `ready` again, and any answer resets the count.
 * Cordoned and draining hosts keep their state; every host's result is recorded.
 *
 * Hosts are probed concurrently (the pool bounds the handshakes); a state change is written only
 * if the host is still at the version read (an operator's cordon meanwhile wins). A process killed
 * mid-pass has written some hosts' results; the next pass writes the rest.
 */
import type { Db } from '../db/knex.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { hostMoveAllowed } from './host-states.js'
import { HostKeyMismatchError, SshConnectError, SshTimeoutError, type SshPool } from './ssh-pool.js'
import type { SshKeyStore } from './ssh-keys.js'
import { hostsToProbe, recordProbe, updateHostState, type Host, type ProbeResult } from './store.js'

export const HOST_PROBE_JOB = 'host-probe'

export interface HostProbeDeps {
  db: Db
  pool: SshPool
  keys: SshKeyStore
  /** How long one probe command may take before it counts as failed. */
  timeoutMs: number
  /** Failed probes in a row before a `ready` host becomes `unreachable` (HOSTS_PROBE_FAILURES). */
  failuresBeforeUnreachable: number
}

export const DEFAULT_PROBE_FAILURES_BEFORE_UNREACHABLE = 3

async function probeOne(deps: HostProbeDeps, host: Host): Promise<{ result: ProbeResult; error: string | null }> {
  try {
    const privateKey = await deps.keys.get(host.id)
    const answer = await deps.pool.exec({ id: host.id, address: host.address, port: host.port, user: host.user, privateKey, hostKeyFingerprint: host.host_key_fingerprint }, 'true', { timeoutMs: deps.timeoutMs })
    return answer.code === 0 ? { result: 'ok', error: null } : { result: 'failed', error: `the probe command exited ${answer.code ?? answer.signal}` }
  } catch (err) {
    if (err instanceof HostKeyMismatchError) return { result: 'host_key_mismatch', error: err.message }
    if (err instanceof SshConnectError || err instanceof SshTimeoutError) {
      // A timed-out command may leave a half-dead connection: the next probe opens a new one.
      deps.pool.drop(host.id)
      return { result: 'unreachable', error: err.message }
    }
    return { result: 'failed', error: (err as Error).message }
  }
}

/** One pass over the fleet; returns the hosts whose state changed. */
export async function probeHosts(deps: HostProbeDeps, now: Date, logger?: Logger): Promise<Array<{ host: string; from: string; to: string }>> {
  const hosts = await hostsToProbe(deps.db)
  const changes: Array<{ host: string; from: string; to: string }> = []
  await Promise.all(
    hosts.map(async (host) => {
      const { result, error } = await probeOne(deps, host)
      const failures = await recordProbe(deps.db, host.id, result, error, now)
      const action = result === 'ok' ? 'probe_ok' : 'probe_failed'
      if (!hostMoveAllowed(host.state, action)) return
      if (action === 'probe_failed' && result !== 'host_key_mismatch' && failures < deps.failuresBeforeUnreachable) return
      const to = action === 'probe_ok' ? 'ready' : 'unreachable'
      if (await updateHostState(deps.db, host, to, now)) {
        changes.push({ host: host.name, from: host.state, to })
        logger?.warn({ host: host.name, hostId: host.id, from: host.state, to, result, error, failed_probes_in_a_row: failures }, 'host state changed by the health probe')
      }
    }),
  )
  return changes
}

export function scheduleHostProbe(schedule: JobSchedule, deps: HostProbeDeps, intervalMs: number): PeriodicJob {
  return scheduleJobEvery(schedule, { name: HOST_PROBE_JOB, intervalMs, run: async (now, logger) => void (await probeHosts(deps, now, logger)) })
}
