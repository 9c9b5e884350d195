/**
 * What a rollout waits for, and until when, as the live view and the watch lines say it: a node's
 * health wait (it validates for health_wait_duration from when its upgrade completed, which is
 * when its row moved to `validating`), the canary gate (the canary batch is observed for twice the
 * health wait, then a breaking migration waits for approve-canary), a scheduled start.
 * Batches are numbered from 1 for people; the API's `batch_index` counts from 0.
 */
import type { RolloutDetailView, RolloutNodeView } from '../rollouts/views.js'
import { remaining, stamp } from './human-time.js'

export function batchNumber(batchIndex: number): number {
  return batchIndex + 1
}

type HealthWaitRollout = Pick<RolloutDetailView, 'health_wait_duration_ms'>

/** A validating node's health wait: `health wait until 12:00:05Z (1m30s left)`; null otherwise. */
export function healthWaitText(r: HealthWaitRollout, n: Pick<RolloutNodeView, 'status' | 'updated_at'>, now: Date = new Date()): string | null {
  if (n.status !== 'validating') return null
  const until = new Date(Date.parse(n.updated_at) + r.health_wait_duration_ms).toISOString()
  return `health wait until ${stamp(until)} (${remaining(until, now)})`
}

export type CanaryGate = 'not_reached' | 'canary_failed' | 'observing' | 'awaiting_approval' | 'approved'

export interface CanaryGateState {
  gate: CanaryGate
  text: string
}

/**
 * Where a canary rollout stands at its gate. Approval is not recorded apart: a gate that no longer
 * waits once the canary batch passed its observation, or a rollout past its canary batch, was approved.
 */
export function canaryGate(
  r: Pick<RolloutDetailView, 'status' | 'pause_reason' | 'awaiting' | 'current_batch' | 'health_wait_duration_ms' | 'migration_type'>,
  nodes: readonly Pick<RolloutNodeView, 'batch_index' | 'status' | 'completed_at'>[],
  now: Date = new Date(),
): CanaryGateState {
  const passedWord = r.migration_type === 'breaking' ? 'approved' : 'passed'
  if (r.status === 'running' && r.awaiting === 'approve_canary') return { gate: 'awaiting_approval', text: 'waiting for your approval' }
  if ((r.current_batch !== null && r.current_batch > 0) || r.status === 'completed') return { gate: 'approved', text: passedWord }
  const canary = nodes.filter((n) => n.batch_index === 0)
  if (r.pause_reason === 'canary_failed' || canary.some((n) => n.status === 'failed')) return { gate: 'canary_failed', text: 'the canary failed' }
  if (canary.length === 0 || !canary.every((n) => n.status === 'succeeded')) return { gate: 'not_reached', text: 'not reached yet: the canary batch is upgrading' }
  const lastDone = Math.max(...canary.map((n) => (n.completed_at ? Date.parse(n.completed_at) : 0)))
  const observedUntil = new Date(lastDone + 2 * r.health_wait_duration_ms).toISOString()
  if (Date.parse(observedUntil) > now.getTime()) {
    const then = r.migration_type === 'breaking' ? ', then it waits for your approval' : ''
    return { gate: 'observing', text: `observing the canary until ${stamp(observedUntil)} (${remaining(observedUntil, now)})${then}` }
  }
  return { gate: 'approved', text: passedWord }
}
