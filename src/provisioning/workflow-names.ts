/**
 * Names and rules of the lifecycle workflows that starting one needs (triggers.ts). Apart from the
 * workflow modules (which re-export them) so that starting a run, as the operator commands do,
 * does not load the workflows' steps and everything they use.
 */
import type { NodeState } from '../nodes/states.js'

export const PROVISION_WORKFLOW = 'provision'
export const TERMINATE_WORKFLOW = 'terminate'
export const MIGRATE_WORKFLOW = 'migrate'
/** Moves every node off a fleet host, one migration at a time (src/provisioning/host-drain.ts); key = the drain's id. */
export const HOST_DRAIN_WORKFLOW = 'host-drain'

/** Spec (Limits): migration cooldown between attempts. */
export const MIGRATION_COOLDOWN_MS = 3_600_000

/**
 * States a migration may start from: those whose next states include `maintenance` in the
 * spec's table. `syncing` is not one of them, and the forced path is for compensation only.
 */
export const MIGRATABLE_STATES: readonly NodeState[] = ['healthy', 'degraded', 'down']

export function migrationKey(nodeId: string, triggeredAt: Date): string {
  return `${nodeId}:${triggeredAt.toISOString()}`
}

/**
 * The host key of the new host a migration attempt creates. Known before the attempt starts, so
 * a drain can reserve the node's room on another fleet host first (the provider's placement finds
 * a reservation by host key).
 */
export function migrationHostKey(nodeId: string, triggeredAt: Date): string {
  return `${nodeId}-m${triggeredAt.getTime()}`
}
