import type { SYNC_STATUSES_REPORTED } from '../../agent-gateway/protocol.js'

export type ReportedSyncStatus = (typeof SYNC_STATUSES_REPORTED)[number]

/** One application-health check of the chain process, as the agent reports it in heartbeats. */
export interface ProbeReport {
  sync_status: ReportedSyncStatus
  metrics: Record<string, number>
  /** The chain answered its probe; a stall is reported through `sync_status`, not here. */
  healthy: boolean
  /** Why the check failed: short, and never carrying the probe's URL or credentials. */
  error?: string
}

export interface Probe {
  check(): Promise<ProbeReport>
}
