/**
 * `rollout status --watch` and the `--watch` of the rollout actions: poll the API, report each
 * change, stop when the rollout has ended or waits for an operator. The display is given in
 * (plain lines, or the ink view on a terminal), so this module decides only what changed and
 * when to stop.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { RolloutDetailView, RolloutNodeView } from '../rollouts/views.js'
import { ValidationError } from '../errors.js'
import { parseDuration } from '../config/duration.js'
import type { ApiClient } from './api-client.js'
import { listAll } from './pages.js'
import { batchNumber, healthWaitText } from './rollout-waits.js'
import { batchText, describeState, nextActions, rolloutNotFound, rolloutOutcome, statusText } from './rollout-views.js'

export interface RolloutSnapshot {
  rollout: RolloutDetailView
  nodes: RolloutNodeView[]
}

export async function fetchSnapshot(api: ApiClient, id: string): Promise<RolloutSnapshot> {
  const path = `/rollouts/${encodeURIComponent(id)}`
  const rollout = await api.get<RolloutDetailView>(path).catch(rolloutNotFound(id))
  const nodes = rollout.batch_count === null && rollout.total_nodes === 0 ? [] : await listAll<RolloutNodeView>(api, `${path}/nodes`)
  return { rollout, nodes }
}

/**
 * Whether watching is over. `signalledAt` is the rollout's version as the API answered a signal
 * this command sent: until the workflow has acted on it (the version moved), the rollout still
 * shows the state the signal is meant to end (paused, awaiting approval), which is no reason to stop.
 */
export function watchIsOver(r: RolloutDetailView, signalledAt?: number): boolean {
  const outcome = rolloutOutcome(r)
  if (outcome === 'completed' || outcome === 'ended') return true
  if (outcome === 'waiting') return signalledAt === undefined || r.version !== signalledAt
  return false
}

function clock(at: Date): string {
  return `${at.toISOString().slice(11, 19)}Z`
}

function rolloutLine(r: RolloutDetailView): string {
  const state = describeState(r)
  return `rollout ${r.id} ${statusText(r)}, ${batchText(r)}: ${r.succeeded_nodes}/${r.total_nodes} succeeded, ${r.failed_nodes} failed${r.forced ? ' (forced)' : ''}${state ? ` — ${state}` : ''}`
}

function nodeLine(r: RolloutDetailView, n: RolloutNodeView, at: Date): string {
  const attempt = n.attempt_count > 1 ? `, attempt ${n.attempt_count}` : ''
  const error = n.status === 'failed' && n.error_message ? `: ${n.error_message}` : ''
  const wait = healthWaitText(r, n, at)
  return `node ${n.node_id} (batch ${batchNumber(n.batch_index)}) ${n.status}${n.upgrade_phase ? `, phase ${n.upgrade_phase}` : ''}${attempt}${error}${wait ? `; ${wait}` : ''}`
}

const rolloutKey = (r: RolloutDetailView) =>
  [r.status, r.pause_reason, r.awaiting, r.current_batch, r.batch_count, r.total_nodes, r.succeeded_nodes, r.failed_nodes, r.forced].join('|')
const nodeKey = (n: RolloutNodeView) => [n.status, n.upgrade_phase, n.attempt_count].join('|')

/** One line per change since `previous` (everything on the first snapshot), for CI logs. */
export function changeLines(previous: RolloutSnapshot | undefined, next: RolloutSnapshot, at: Date = new Date()): string[] {
  const lines: string[] = []
  const time = clock(at)
  if (!previous || rolloutKey(previous.rollout) !== rolloutKey(next.rollout)) lines.push(`${time} ${rolloutLine(next.rollout)}`)
  const before = new Map((previous?.nodes ?? []).map((n) => [n.node_id, nodeKey(n)]))
  for (const n of next.nodes) {
    if (before.get(n.node_id) !== nodeKey(n)) lines.push(`${time} ${nodeLine(next.rollout, n, at)}`)
  }
  return lines
}

/** The closing lines: the outcome and, when someone has to act, what they can run. */
export function finalLines(r: RolloutDetailView): string[] {
  const outcome = rolloutOutcome(r)
  const head =
    outcome === 'completed'
      ? `Rollout ${r.id} completed: ${r.succeeded_nodes}/${r.total_nodes} nodes upgraded to ${r.target_version}.`
      : outcome === 'ended'
        ? `Rollout ${r.id} ${r.status.replace('_', ' ')}: ${r.succeeded_nodes}/${r.total_nodes} succeeded, ${r.failed_nodes} failed.${r.error_message ? ` ${r.error_message}` : ''}`
        : `Rollout ${r.id} waits for an operator: ${describeState(r) ?? statusText(r)}.`
  const actions = outcome === 'completed' ? [] : nextActions(r)
  return actions.length > 0 ? [head, 'Next:', ...actions.map((a) => `  ${a}`)] : [head]
}

export interface WatchOptions {
  intervalMs: number
  /** See watchIsOver. */
  signalledAt?: number
  /** Called with every snapshot, the first and last included. */
  onSnapshot: (snapshot: RolloutSnapshot) => void
}

/** Polls until watchIsOver; returns the last snapshot. */
export async function watchRollout(api: ApiClient, id: string, options: WatchOptions): Promise<RolloutSnapshot> {
  for (;;) {
    const snapshot = await fetchSnapshot(api, id)
    options.onSnapshot(snapshot)
    if (watchIsOver(snapshot.rollout, options.signalledAt)) return snapshot
    await sleep(options.intervalMs)
  }
}

/** `--interval` as a duration string, 200ms to 1h. */
export function parseInterval(text: string): number {
  const ms = parseDuration(text)
  if (ms === null || ms < 200 || ms > 3_600_000) throw new ValidationError(`--interval must be a duration between 200ms and 1h, got "${text}"`, 'for example --interval 1s or --interval 5s')
  return ms
}
