/** The rollout workflows' names and signals, shared by the workflows and the control functions. */
import type { GroupSignal, RolloutSignal } from './states.js'

export const ROLLOUT_WORKFLOW = 'rollout'
export const GROUP_WORKFLOW = 'rollout-group'
/** The one signal name a rollout waits on; the payload says which operator signal it is. */
export const CONTROL_SIGNAL = 'control'
/** The one signal name a group waits on: the operator's signals, and its components finishing. */
export const GROUP_CONTROL_SIGNAL = 'group-control'

export interface ControlSignal {
  signal: RolloutSignal
  by: string
}

/** `component_changed`: a component's rollout ended or paused (its group looks at it again). */
export type GroupControlSignal = { signal: GroupSignal; by: string } | { signal: 'component_changed'; by: string; rollout_id: string }
