/**
 * Human output of the rollout commands, and the outcome a watched rollout ends with (its exit
 * code). The `--json` output is the commands' return value: the API's JSON (src/rollouts/views.ts).
 */
import type { RolloutDetailView, RolloutNodeView, RolloutView } from '../rollouts/views.js'
import { NotFoundError } from '../errors.js'
import { renderTable } from './display.js'
import { age, ahead, moment, took } from './human-time.js'
import { EXIT } from './exit-codes.js'
import { batchNumber } from './rollout-waits.js'

/**
 * `rollout status|start --watch` stops with this when the rollout waits for a person: paused
 * (by an operator, the failure threshold, a failed canary), a breaking migration's canary waiting
 * for approval, or a rollout never started. 5 is uptime's; 6 was free (docs/cli.md).
 */
export const EXIT_WAITING_FOR_OPERATOR = 6

export type RolloutOutcome = 'completed' | 'ended' | 'waiting' | 'in_progress'

type RolloutState = Pick<RolloutView, 'status' | 'pause_reason' | 'awaiting'>

/**
 * Where a rollout stands for someone watching it: `completed` (exit 0), `ended` without
 * completing (failed, cancelled, rolled back: exit 1), `waiting` for an operator (exit 6), or
 * still `in_progress` (running, scheduled, or paused only while its rollback runs).
 */
export function rolloutOutcome(r: RolloutState): RolloutOutcome {
  switch (r.status) {
    case 'completed':
      return 'completed'
    case 'failed':
    case 'cancelled':
    case 'rolled_back':
      return 'ended'
    case 'pending':
      return 'waiting'
    case 'paused':
      // A full rollback pauses the rollout while the workflow reverts its nodes: nobody needs to act.
      return r.pause_reason === 'rollback' ? 'in_progress' : 'waiting'
    case 'running':
      return r.awaiting === 'approve_canary' ? 'waiting' : 'in_progress'
    case 'scheduled':
      return 'in_progress'
  }
}

export function outcomeExitCode(outcome: RolloutOutcome): number {
  switch (outcome) {
    case 'completed':
    case 'in_progress':
      return EXIT.ok
    case 'ended':
      return EXIT.failure
    case 'waiting':
      return EXIT_WAITING_FOR_OPERATOR
  }
}

const PAUSE_REASONS: Record<string, string> = {
  operator: 'paused by an operator',
  failure_threshold: 'auto-paused: more nodes failed than the failure threshold allows',
  canary_failed: 'auto-paused: the canary failed',
  rollback: 'rolling back every upgraded node',
  component_failed: 'paused: a component of its group failed',
}

/** Why the rollout waits or stops, in words; null when it simply runs. */
export function describeState(r: RolloutState & Pick<RolloutView, 'scheduled_at' | 'error_message'>): string | null {
  if (r.status === 'paused') return PAUSE_REASONS[r.pause_reason ?? ''] ?? `paused (${r.pause_reason ?? 'no reason given'})`
  if (r.status === 'running' && r.awaiting === 'approve_canary') return 'the canary of a breaking migration waits for approval'
  if (r.status === 'pending') return 'created, not started'
  if (r.status === 'scheduled') return `starts at ${ahead(r.scheduled_at)}`
  if (r.error_message && (r.status === 'failed' || r.status === 'rolled_back' || r.status === 'completed')) return r.error_message
  return null
}

/** The commands an operator can run now, given the rollout's status (docs/rollouts.md, status tables). */
export function nextActions(r: Pick<RolloutView, 'id' | 'status' | 'pause_reason' | 'awaiting' | 'failed_nodes' | 'chain_profile_id'>): string[] {
  const id = `--id ${r.id}`
  const rollingBack = r.pause_reason === 'rollback'
  switch (r.status) {
    case 'pending':
      return [`nodeplane rollout start ${id} --watch`]
    case 'scheduled':
      return [`nodeplane rollout status ${id} --watch`]
    case 'running': {
      const actions = r.awaiting === 'approve_canary' ? [`nodeplane rollout approve-canary ${id} --watch`] : []
      actions.push(`nodeplane rollout pause ${id}`, `nodeplane rollout cancel ${id}`, `nodeplane rollout rollback ${id}`)
      if (r.failed_nodes > 0) actions.push(`nodeplane rollout nodes ${id} --status failed`)
      return actions
    }
    case 'paused': {
      if (rollingBack) return [`nodeplane rollout status ${id} --watch`]
      const actions = [
        r.pause_reason === 'failure_threshold' ? `nodeplane rollout force ${id} --watch` : `nodeplane rollout resume ${id} --watch`,
        `nodeplane rollout cancel ${id}`,
        `nodeplane rollout rollback ${id}`,
      ]
      if (r.failed_nodes > 0) actions.push(`nodeplane rollout nodes ${id} --status failed`, `nodeplane rollout retry-node ${id} --node NODE_ID`)
      return actions
    }
    case 'failed':
      return [`nodeplane rollout nodes ${id} --status failed`, `nodeplane rollout create --chain ${r.chain_profile_id} …   # a new rollout retries the failed nodes`]
    case 'completed':
    case 'cancelled':
    case 'rolled_back':
      return []
  }
}

function progress(r: Pick<RolloutView, 'succeeded_nodes' | 'failed_nodes' | 'total_nodes'>): string {
  return `${r.succeeded_nodes}/${r.total_nodes} succeeded, ${r.failed_nodes} failed`
}

/** `batch 2/5` (numbered from 1, as the live view's rows), or `-` before the plan. */
export function batchText(r: Pick<RolloutView, 'current_batch' | 'batch_count'>): string {
  if (r.batch_count === null) return 'not planned yet'
  if (r.current_batch === null) return `${r.batch_count} ${r.batch_count === 1 ? 'batch' : 'batches'}`
  return `batch ${r.current_batch + 1}/${r.batch_count}`
}

export function statusText(r: RolloutState): string {
  if (r.status === 'paused' && r.pause_reason) return `paused (${r.pause_reason})`
  if (r.status === 'running' && r.awaiting) return `running (awaiting ${r.awaiting})`
  return r.status
}

export function renderRollouts(rollouts: readonly RolloutView[]): string {
  return renderTable(rollouts, [
    { header: 'id', value: (r) => r.id, id: true },
    { header: 'chain', value: (r) => `${r.chain_profile_id}/${r.node_type}` },
    { header: 'upgrade', value: (r) => `${r.binary_name} ${r.source_version} -> ${r.target_version}` },
    { header: 'strategy', value: (r) => r.strategy },
    { header: 'status', value: (r) => statusText(r), state: true },
    { header: 'progress', value: (r) => progress(r) },
    { header: 'created', value: (r) => age(r.created_at) },
  ])
}

export function noRollouts(filtered: boolean): string {
  return filtered ? 'No rollouts match these filters.' : 'No rollouts yet. Create one with `nodeplane rollout create`.'
}

export function renderRolloutNodes(nodes: readonly RolloutNodeView[]): string {
  return renderTable(nodes, [
    { header: 'batch', value: (n) => String(batchNumber(n.batch_index)) },
    { header: 'node', value: (n) => n.node_id, id: true },
    { header: 'status', value: (n) => n.status, state: true },
    { header: 'phase', value: (n) => n.upgrade_phase ?? '-' },
    { header: 'attempts', value: (n) => String(n.attempt_count) },
    { header: 'from', value: (n) => n.previous_version ?? '-' },
    { header: 'error', value: (n) => n.error_message ?? '' },
  ])
}

export function noRolloutNodes(r: Pick<RolloutView, 'batch_count' | 'status'>, filtered: boolean): string {
  if (filtered) return 'No nodes of this rollout match.'
  return r.batch_count === null ? `No nodes yet: a rollout plans its batches when it starts (it is ${r.status}).` : 'No node was eligible (chain, node type, source version, a healthy or degraded state, an active subscription).'
}

/** `rollout status` without --watch, and `rollout create`. */
export function describeRollout(r: RolloutView | RolloutDetailView): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(15)}${value}`
  const state = describeState(r)
  const lines = [
    `rollout ${r.id}`,
    line('status', state ? `${statusText(r)}: ${state}` : statusText(r)),
    line('chain', `${r.chain_profile_id}, node type ${r.node_type}`),
    line('upgrade', `${r.binary_name} ${r.source_version} -> ${r.target_version} (${r.migration_type ?? 'non_breaking'}${r.upgrade_id ? `, manifest ${r.upgrade_id}` : ', manual'})`),
    line('strategy', `${r.strategy}, batch size ${r.batch_size}${r.canary_size !== null ? `, canary ${r.canary_size}` : ''}, failure threshold ${r.failure_threshold}${r.forced ? ' (forced)' : ''}, health wait ${r.health_wait_duration}`),
    line('progress', r.batch_count === null ? 'not planned yet (the eligible nodes are chosen when it starts)' : `${progress(r)}; ${batchText(r)}`),
  ]
  if ('node_counts' in r) {
    const counts = Object.entries(r.node_counts)
      .filter(([, n]) => n > 0)
      .map(([status, n]) => `${n} ${status}`)
    lines.push(line('nodes', counts.length > 0 ? counts.join(', ') : 'none yet'))
  }
  lines.push(line('created', `${moment(r.created_at)}${r.reason ? `: ${r.reason}` : ''}`))
  if (r.started_at) lines.push(line('started', moment(r.started_at)))
  if (r.completed_at) lines.push(line('finished', `${moment(r.completed_at)}, took ${took(r.started_at, r.completed_at)}`))
  const actions = nextActions(r)
  if (actions.length > 0) lines.push('', '  next:', ...actions.map((a) => `    ${a}`))
  return lines.join('\n')
}

/** An API 404 for one rollout, said as a person needs it (exit 3 stays). */
export function rolloutNotFound(id: string): (err: unknown) => never {
  return (err) => {
    if (err instanceof NotFoundError) throw new NotFoundError(`no rollout ${id}`, 'list them with `nodeplane rollout list`')
    throw err
  }
}

/** What a signal did: the workflow acts on it between batches, so say so. */
export function describeSignal(action: string, r: RolloutView, hint = true): string {
  const effect: Record<string, string> = {
    start: r.status === 'scheduled' ? `scheduled; it starts at ${ahead(r.scheduled_at)}` : 'started',
    pause: 'will pause after its current batch',
    resume: 'resumes',
    cancel: 'is being cancelled: no new batches, nodes in flight finish',
    rollback: 'is being rolled back: every upgraded node returns to the source version',
    'approve-canary': 'canary approved: the rest of the fleet follows',
    force: 'forced past its failure threshold: it goes on',
  }
  const follow = hint ? ` Follow it with \`nodeplane rollout status --id ${r.id} --watch\`.` : ''
  return `Rollout ${r.id} ${effect[action] ?? action}.${follow}`
}
