/**
 * Names and rules of the lifecycle workflows that starting one needs (triggers.ts). Apart from the
 * workflow modules (which re-export them) so that starting a run, as the operator commands do,
 * does not load the workflows' steps and everything they use.
 */
import type { NodeState } from '../nodes/states.js'

export const PROVISION_WORKFLOW = 'provision'
export const TERMINATE_WORKFLOW = 'terminate'
export const MIGRATE_WORKFLOW = 'migrate'

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
