/**
 * When each rollout signal makes sense (docs/rollouts.md, "Signals"). One rule for the API, which
 * refuses with a 409, and the CLI, which checks it before asking a person to confirm, so a
 * signal that cannot apply is refused before anyone is asked.
 */
import { ConflictError } from '../errors.js'
import type { RolloutSignal, RolloutStatus } from './states.js'

export interface SignalledRollout {
  id: string
  status: RolloutStatus
  pause_reason: string | null
  awaiting: string | null
  group_id: string | null
}

/** Why `signal` cannot apply to the rollout as it is; null when it can. */
export function signalRefusal(r: SignalledRollout, signal: RolloutSignal): string | null {
  const rollingBack = r.pause_reason === 'rollback'
  switch (signal) {
    case 'pause':
      return r.status === 'running' ? null : 'only a running rollout can be paused'
    case 'resume':
      return r.status === 'paused' && !rollingBack ? null : rollingBack ? 'it is being rolled back' : 'only a paused rollout can be resumed'
    case 'cancel':
      if ((r.status === 'pending' || r.status === 'scheduled') && r.group_id) return 'its group decides its components: cancel the group instead'
      return ['pending', 'scheduled', 'running', 'paused'].includes(r.status) && !rollingBack ? null : rollingBack ? 'it is being rolled back' : 'only a pending, scheduled, running or paused rollout can be cancelled'
    case 'rollback':
      return (r.status === 'running' || r.status === 'paused') && !rollingBack ? null : rollingBack ? 'it is already being rolled back' : 'only a running or paused rollout can be rolled back'
    case 'force':
      return (r.status === 'running' || r.status === 'paused') && !rollingBack ? null : 'only a running or paused rollout can be forced past its failure threshold'
    case 'approve_canary':
      if (r.status === 'paused' && !rollingBack) return 'it is paused: resume it first; its canary gate then waits for the approval again'
      return r.status === 'running' && r.awaiting === 'approve_canary' ? null : 'it is not waiting for a canary approval'
  }
}

/** The 409 of a refused signal, the same words from the API and the CLI. */
export function assertSignalApplies(r: SignalledRollout, signal: RolloutSignal): void {
  const refused = signalRefusal(r, signal)
  if (refused) throw new ConflictError(`cannot ${signal.replace('_', ' ')} rollout ${r.id}: it is ${r.status}`, refused)
}
