/**
 * Rollout vocabulary and status tables (spec: "Rollout group", "Rollout (single component)",
 * "Rollout node", "Rollout status"; docs/rollouts.md). The rollout table is the spec's; the
 * group and rollout-node tables are ours (the spec lists their values only) and are written
 * down in docs/rollouts.md.
 */
export const ROLLOUT_STRATEGIES = ['rolling', 'canary', 'all_at_once'] as const
export type RolloutStrategy = (typeof ROLLOUT_STRATEGIES)[number]

export const ROLLOUT_STATUSES = ['pending', 'scheduled', 'running', 'paused', 'completed', 'failed', 'cancelled', 'rolled_back'] as const
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number]

/** Spec: at most one rollout per chain profile in these. */
export const ACTIVE_ROLLOUT_STATUSES: readonly RolloutStatus[] = ['pending', 'scheduled', 'running', 'paused']

/**
 * Spec: "Rollout status" — every other move is refused (409). Extension (docs/rollouts.md):
 * pending and scheduled may be cancelled, or a rollout scheduled far ahead would hold its chain's
 * one active slot until it fired.
 */
export const ROLLOUT_TRANSITIONS: Readonly<Record<RolloutStatus, readonly RolloutStatus[]>> = {
  pending: ['scheduled', 'running', 'cancelled'],
  scheduled: ['running', 'cancelled'],
  running: ['paused', 'completed', 'failed', 'cancelled', 'rolled_back'],
  paused: ['running', 'cancelled', 'rolled_back'],
  completed: [],
  failed: [],
  cancelled: [],
  rolled_back: [],
}

export function canMoveRollout(from: RolloutStatus, to: RolloutStatus): boolean {
  return ROLLOUT_TRANSITIONS[from].includes(to)
}

export const ROLLOUT_NODE_STATUSES = ['pending', 'in_progress', 'validating', 'succeeded', 'failed', 'rolled_back', 'skipped'] as const
export type RolloutNodeStatus = (typeof ROLLOUT_NODE_STATUSES)[number]

export const ROLLOUT_GROUP_STATUSES = ['pending', 'running', 'paused', 'completed', 'partial', 'failed', 'cancelled', 'rolled_back'] as const
export type RolloutGroupStatus = (typeof ROLLOUT_GROUP_STATUSES)[number]

/** Spec: at most one group per chain profile in these. */
export const ACTIVE_GROUP_STATUSES: readonly RolloutGroupStatus[] = ['pending', 'running', 'paused']

export const ROLLOUT_GROUP_TRANSITIONS: Readonly<Record<RolloutGroupStatus, readonly RolloutGroupStatus[]>> = {
  pending: ['running', 'cancelled'],
  running: ['paused', 'completed', 'partial', 'failed', 'cancelled', 'rolled_back'],
  paused: ['running', 'cancelled', 'rolled_back', 'partial', 'failed'],
  completed: [],
  partial: [],
  failed: [],
  cancelled: [],
  rolled_back: [],
}

export function canMoveGroup(from: RolloutGroupStatus, to: RolloutGroupStatus): boolean {
  return ROLLOUT_GROUP_TRANSITIONS[from].includes(to)
}

export const FAILURE_POLICIES = ['partial_ok', 'rollback_all', 'manual'] as const
export type FailurePolicy = (typeof FAILURE_POLICIES)[number]

/** Signals an operator sends to a running rollout (spec: "Signals"). */
export const ROLLOUT_SIGNALS = ['pause', 'resume', 'cancel', 'force', 'approve_canary', 'rollback'] as const
export type RolloutSignal = (typeof ROLLOUT_SIGNALS)[number]

export const GROUP_SIGNALS = ['pause', 'resume', 'cancel', 'skip'] as const
export type GroupSignal = (typeof GROUP_SIGNALS)[number]
