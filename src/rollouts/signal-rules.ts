/**
 * When each rollout and group signal makes sense (docs/rollouts.md, "Signals"), and the one rule
 * for repeats (docs/cli.md, "Repeats"): a signal whose effect already holds (pausing a paused
 * rollout, cancelling a cancelled one) is a repeat, answered with the rollout as it is and
 * `changed: false`, nothing sent; one the state forbids is refused (409) with what to do instead.
 * One rule for the API and the CLI, which checks it before asking a person to confirm, so a
 * signal that cannot apply is refused before anyone is asked, and a repeat is not asked about.
 * Judged by the status alone: a second signal sent before the workflow took the first one is
 * queued too, and means nothing more (the workflow takes a pause once, ignores a stale resume).
 */
import { ConflictError } from '../errors.js'
import type { MigrationType } from './manifests.js'
import type { GroupSignal, RolloutGroupStatus, RolloutSignal, RolloutStatus, RolloutStrategy } from './states.js'

export interface SignalledRollout {
  id: string
  status: RolloutStatus
  pause_reason: string | null
  awaiting: string | null
  group_id: string | null
  forced: boolean
  strategy: RolloutStrategy
  migration_type: MigrationType | null
  current_batch: number | null
}

export interface SignalledGroup {
  id: string
  status: RolloutGroupStatus
}

/** `send`: hand it on; `repeat`: its effect already holds (`already` completes "was already …"); `refuse`: why not. */
export type SignalVerdict = { kind: 'send' } | { kind: 'repeat'; already: string } | { kind: 'refuse'; reason: string }

export type RolloutAction = RolloutSignal | 'start'
export type GroupAction = GroupSignal | 'start'

const SEND: SignalVerdict = { kind: 'send' }
const repeat = (already: string): SignalVerdict => ({ kind: 'repeat', already })
const refuse = (reason: string): SignalVerdict => ({ kind: 'refuse', reason })

const ROLLING_BACK = 'it is being rolled back: wait for it to end (`nodeplane rollout status ID --watch`)'

export function judgeRolloutSignal(r: SignalledRollout, action: RolloutAction): SignalVerdict {
  const rollingBack = r.status === 'paused' && r.pause_reason === 'rollback'
  const live = r.status === 'running' || r.status === 'paused'
  switch (action) {
    case 'start':
      if (r.group_id) return refuse('its group starts it: POST /api/v1/rollout-groups/{id}/start')
      if (r.status === 'pending') return SEND
      if (r.status === 'running') return repeat('started')
      if (r.status === 'scheduled') return repeat('scheduled')
      return refuse(r.status === 'paused' ? 'it is paused: resume it instead' : 'only a pending rollout can be started')
    case 'pause':
      if (r.status === 'running') return SEND
      if (rollingBack) return refuse(ROLLING_BACK)
      if (r.status === 'paused') return repeat('paused')
      return refuse('only a running rollout can be paused')
    case 'resume':
      if (rollingBack) return refuse(ROLLING_BACK)
      if (r.status === 'paused') return SEND
      if (r.status === 'running' && r.awaiting === 'approve_canary') return refuse('it is not paused: its canary gate waits for your approval; approve it with `nodeplane rollout approve-canary ID`, or cancel or roll it back')
      if (r.status === 'running') return repeat('running')
      return refuse(r.status === 'pending' ? 'it has not started: start it with `nodeplane rollout start ID`' : 'only a paused rollout can be resumed')
    case 'cancel':
      if ((r.status === 'pending' || r.status === 'scheduled') && r.group_id) return refuse('its group decides its components: cancel the group instead')
      if (rollingBack) return refuse(ROLLING_BACK)
      if (live || r.status === 'pending' || r.status === 'scheduled') return SEND
      if (r.status === 'cancelled') return repeat('cancelled')
      return refuse('only a pending, scheduled, running or paused rollout can be cancelled')
    case 'rollback':
      if (rollingBack) return repeat('being rolled back')
      if (r.status === 'rolled_back') return repeat('rolled back')
      return live ? SEND : refuse('only a running or paused rollout can be rolled back')
    case 'force':
      if (rollingBack) return refuse(ROLLING_BACK)
      if (r.status === 'running' && r.forced) return repeat('forced past its failure threshold')
      return live ? SEND : refuse('only a running or paused rollout can be forced past its failure threshold')
    case 'approve_canary':
      if (r.status === 'paused' && !rollingBack) return refuse('it is paused: resume it first; its canary gate then waits for the approval again')
      if (r.status === 'running' && r.awaiting === 'approve_canary') return SEND
      if (canaryPassed(r)) return repeat('past its approved canary gate')
      return refuse('it is not waiting for a canary approval')
  }
}

/** A breaking canary rollout past its canary batch was approved: the gate is the only way on. */
function canaryPassed(r: SignalledRollout): boolean {
  if (r.strategy !== 'canary' || r.migration_type !== 'breaking') return false
  return r.status === 'completed' || (r.status === 'running' && r.current_batch !== null && r.current_batch > 0)
}

export function judgeGroupSignal(g: SignalledGroup, action: GroupAction): SignalVerdict {
  switch (action) {
    case 'start':
      if (g.status === 'pending') return SEND
      if (g.status === 'running') return repeat('started')
      return refuse(g.status === 'paused' ? 'it is paused: resume it instead' : 'only a pending group can be started')
    case 'pause':
      if (g.status === 'running') return SEND
      if (g.status === 'paused') return repeat('paused')
      return refuse('only a running group can be paused')
    case 'resume':
      if (g.status === 'paused') return SEND
      if (g.status === 'running') return repeat('running')
      return refuse(g.status === 'pending' ? 'it has not started: start it with `nodeplane rollout-group start ID`' : 'only a paused group can be resumed')
    case 'cancel':
      if (g.status === 'pending' || g.status === 'running' || g.status === 'paused') return SEND
      if (g.status === 'cancelled') return repeat('cancelled')
      return refuse('only a pending, running or paused group can be cancelled')
    case 'skip':
      // Never a repeat: each skip moves past one more component.
      return g.status === 'running' || g.status === 'paused' ? SEND : refuse('components are skipped while the group runs or is paused')
  }
}

/** The 409 of a refused action, the same words from the API and the CLI; otherwise whether it is a repeat. */
export function checkRolloutSignal(r: SignalledRollout, action: RolloutAction): Exclude<SignalVerdict, { kind: 'refuse' }> {
  const verdict = judgeRolloutSignal(r, action)
  if (verdict.kind === 'refuse') throw new ConflictError(`cannot ${action.replace('_', ' ')} rollout ${r.id}: it is ${r.status}`, verdict.reason)
  return verdict
}

export function checkGroupSignal(g: SignalledGroup, action: GroupAction): Exclude<SignalVerdict, { kind: 'refuse' }> {
  const verdict = judgeGroupSignal(g, action)
  if (verdict.kind === 'refuse') throw new ConflictError(`cannot ${action} rollout group ${g.id}: it is ${g.status}`, verdict.reason)
  return verdict
}
