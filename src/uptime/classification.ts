/**
 * How each node state counts toward uptime (docs/uptime.md, "What counts as up"). The spec fixes
 * only the provisioning grace; the rest is chosen as an SLA customer would read the figure:
 * "was my node there and answering?".
 */
import type { NodeState } from '../nodes/states.js'

/** `none`: the node no longer exists (terminal); its time is in no bucket at all. */
export type UptimeClass = 'up' | 'down' | 'unknown' | 'none'

/** Spec, "Uptime rules": provisioning counts as uptime for a 10 minute grace period. */
export const PROVISIONING_GRACE_MS = 10 * 60_000

export const STATE_CLASSES: Readonly<Record<NodeState, UptimeClass>> = {
  // Provisioning: up during the grace, down after it (see segments in compute.ts).
  provisioning: 'up',
  healthy: 'up',
  // Still heartbeating and answering; the impairment is an incident, not an outage.
  degraded: 'up',
  // Running and catching up with the chain: neither counted for nor against the provider.
  syncing: 'unknown',
  down: 'down',
  // Upgrades and migrations: the node serves nobody, whoever took it offline.
  maintenance: 'down',
  // Being torn down at the end of its subscription: no service is owed any more.
  terminating: 'unknown',
  terminated: 'none',
  failed: 'none',
}

/**
 * Planned maintenance (issue 20 item 12): a node in `maintenance` put there by a rollout the
 * operator started (the state machine's `upgrade` writer, rollbacks included). It stays downtime
 * in the SLA figure; reports show it apart. Migrations (`migration`: after a failure, or an
 * operator's move) and compensations are not planned.
 */
export const PLANNED_MAINTENANCE_TRIGGER = 'upgrade'

/** The state log's trigger is the writer, or `<writer>: <reason>` (state-log.ts, triggerOf). */
export function isPlannedDowntime(state: string, trigger: string | undefined): boolean {
  return state === 'maintenance' && (trigger === PLANNED_MAINTENANCE_TRIGGER || trigger?.startsWith(`${PLANNED_MAINTENANCE_TRIGGER}: `) === true)
}

export function classOfState(state: string): UptimeClass {
  return (STATE_CLASSES as Record<string, UptimeClass | undefined>)[state] ?? 'unknown'
}

export function isTerminalClass(state: string): boolean {
  return classOfState(state) === 'none'
}
