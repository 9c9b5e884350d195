/**
 * A host's state (docs/infrastructure.md, "Host states"), as a table of allowed moves:
 *
 * - `ready`: takes new nodes.
 * - `cordoned`: takes no new nodes; its nodes stay. `uncordon` makes it `ready`.
 * - `draining`: takes no new nodes; its nodes are being moved off, then it becomes `cordoned`.
 * - `unreachable`: the health probe could not reach it over SSH; back to `ready` when it answers.
 *   Only a `ready` host is marked unreachable: a cordoned or draining host stays what the operator
 *   made it (its probe result is still recorded).
 * - `removed`: terminal; only a host with no nodes on it may be removed.
 */
import { ConflictError } from '../errors.js'

export const HOST_STATES = ['ready', 'cordoned', 'draining', 'unreachable', 'removed'] as const
export type HostState = (typeof HOST_STATES)[number]

export type HostAction = 'cordon' | 'uncordon' | 'drain' | 'drained' | 'remove' | 'probe_failed' | 'probe_ok'

const MOVES: Record<HostAction, { from: readonly HostState[]; to: HostState }> = {
  cordon: { from: ['ready', 'unreachable'], to: 'cordoned' },
  uncordon: { from: ['cordoned', 'draining'], to: 'ready' },
  drain: { from: ['ready', 'cordoned', 'unreachable'], to: 'draining' },
  drained: { from: ['draining'], to: 'cordoned' },
  remove: { from: ['ready', 'cordoned', 'draining', 'unreachable'], to: 'removed' },
  probe_failed: { from: ['ready'], to: 'unreachable' },
  probe_ok: { from: ['unreachable'], to: 'ready' },
}

/** The state `action` leads to from `from`; throws a ConflictError naming the states it starts from. */
export function nextHostState(from: HostState, action: HostAction, hostName: string): HostState {
  const move = MOVES[action]
  if (!move.from.includes(from)) {
    throw new ConflictError(`host ${hostName} is ${from}`, `${action} applies to a host that is ${move.from.join(' or ')}; host ${hostName} is ${from}`)
  }
  return move.to
}

export function hostMoveAllowed(from: HostState, action: HostAction): boolean {
  return MOVES[action].from.includes(from)
}
