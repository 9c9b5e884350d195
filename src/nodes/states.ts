/**
 * Node health vocabulary and the transition table, exactly as the control-plane spec's
 * "States and transitions / Node state" lists it. Any move not in the table is rejected
 * (except a forced update, for compensation only).
 */

export const NODE_STATES = [
  'provisioning',
  'syncing',
  'healthy',
  'degraded',
  'down',
  'maintenance',
  'terminating',
  'terminated',
  'failed',
] as const
export type NodeState = (typeof NODE_STATES)[number]

export const SYNC_STATUSES = ['unknown', 'syncing', 'synced', 'stalled'] as const
export type SyncStatus = (typeof SYNC_STATUSES)[number]

export const APPLICATION_HEALTH_VALUES = ['unknown', 'ok', 'degraded', 'critical'] as const
export type ApplicationHealth = (typeof APPLICATION_HEALTH_VALUES)[number]

export const INITIAL_NODE_STATE: NodeState = 'provisioning'
export const TERMINAL_NODE_STATES: readonly NodeState[] = ['terminated', 'failed']

export const NODE_TRANSITIONS: Readonly<Record<NodeState, readonly NodeState[]>> = {
  provisioning: ['syncing', 'terminating', 'failed'],
  syncing: ['healthy', 'degraded', 'down', 'terminating'],
  healthy: ['degraded', 'down', 'maintenance', 'terminating'],
  degraded: ['healthy', 'down', 'maintenance', 'terminating'],
  down: ['syncing', 'healthy', 'maintenance', 'terminating'],
  maintenance: ['syncing', 'healthy', 'terminating'],
  terminating: ['terminated', 'failed'],
  terminated: [],
  failed: [],
}

export function isNodeState(value: unknown): value is NodeState {
  return typeof value === 'string' && (NODE_STATES as readonly string[]).includes(value)
}

export function isTerminalState(state: NodeState): boolean {
  return TERMINAL_NODE_STATES.includes(state)
}

export function canTransition(from: NodeState, to: NodeState): boolean {
  return NODE_TRANSITIONS[from].includes(to)
}

/** The combined state shown in API responses (decision recorded in docs/node-health.md). */
export const DISPLAY_STATES = [...NODE_STATES, 'critical', 'stalled'] as const
export type DisplayState = (typeof DISPLAY_STATES)[number]

const SHOWN_AS_THEMSELVES: readonly NodeState[] = ['provisioning', 'down', 'maintenance', 'terminating', 'terminated', 'failed']

/**
 * Infrastructure state first, then application_health, then sync_status (spec: Node rules).
 * The spec leaves the exact mapping open; this is the mapping the foundation issue chose.
 */
export function displayState(node: { state: NodeState; application_health: ApplicationHealth; sync_status: SyncStatus }): DisplayState {
  if (SHOWN_AS_THEMSELVES.includes(node.state)) return node.state
  if (node.application_health === 'critical') return 'critical'
  if (node.application_health === 'degraded') return 'degraded'
  if (node.sync_status === 'syncing') return 'syncing'
  if (node.sync_status === 'stalled') return 'stalled'
  return node.state
}
