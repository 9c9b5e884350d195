/**
 * What the rollout action commands share: the confirmation of destructive signals, sending the
 * action, and following the rollout afterwards (`--watch`) with the live view on a terminal or
 * plain lines elsewhere, ending with the documented exit code.
 */
import * as Flags from '@oclif/core/flags'
import type { RolloutDetailView, SignalledRolloutView } from '../rollouts/views.js'
import type { ApiClient } from './api-client.js'
import { checkRolloutSignal, judgeRolloutSignal, type RolloutAction as RolloutSignalAction } from '../rollouts/signal-rules.js'
import { confirmDestructive } from './prompt.js'
import { alreadyNote } from './repeats.js'
import { describeSignal, outcomeExitCode, rolloutNotFound, rolloutOutcome, statusText } from './rollout-views.js'
import { changeLines, finalLines, parseInterval, watchRollout, type RolloutSnapshot } from './rollout-watch.js'

export const ROLLOUT_ACTIONS = ['start', 'pause', 'resume', 'cancel', 'rollback', 'approve-canary', 'force'] as const
export type RolloutAction = (typeof ROLLOUT_ACTIONS)[number]

const ACTION_WORDS: Record<RolloutAction, string> = {
  start: 'start',
  pause: 'pause',
  resume: 'resume',
  cancel: 'cancel',
  rollback: 'roll back',
  'approve-canary': 'approve the canary of',
  force: 'force',
}

export const rolloutIdFlag = Flags.string({ description: 'rollout id (`nodeplane rollout list` shows them)', required: true })

export const watchFlags = {
  watch: Flags.boolean({
    description: 'then follow the rollout until it ends or waits for an operator (live view on a terminal, one line per change otherwise); exit 0 completed, 1 failed/cancelled/rolled back, 6 waiting for an operator',
  }),
  interval: Flags.string({ description: 'with --watch: how often to ask the API (a duration: 500ms, 1s, 5s)', default: '1s' }),
}

/** The rule each action is judged by (src/rollouts/signal-rules.ts): its workflow signal, or start. */
const SIGNALS: Record<RolloutAction, RolloutSignalAction> = { start: 'start', pause: 'pause', resume: 'resume', cancel: 'cancel', rollback: 'rollback', 'approve-canary': 'approve_canary', force: 'force' }

/**
 * Unless --yes: names the rollout and what the action does to it, asked on a terminal, refused
 * without one (exit 2). An action the rollout's state refuses (a rollout that has ended, one
 * already rolling back, an approval nothing waits for) is refused first, exit 4, with the API's
 * words (src/rollouts/signal-rules.ts): nobody is asked to confirm what cannot happen. Nor a
 * repeat (a rollout already rolling back): the API answers it with nothing changed.
 */
export async function confirmRolloutAction(api: ApiClient, id: string, action: RolloutAction, consequence: string, yes: boolean): Promise<void> {
  await confirmDestructive(yes, async () => {
    const r = await api.get<RolloutDetailView>(`/rollouts/${encodeURIComponent(id)}`).catch(rolloutNotFound(id))
    if (checkRolloutSignal(r, SIGNALS[action]).kind === 'repeat') return undefined
    // Only a breaking migration's canary gate is confirmed: approving it lets the migration reach every node.
    if (action === 'approve-canary' && r.migration_type !== 'breaking') return undefined
    const what = `${r.chain_profile_id}/${r.node_type} ${r.binary_name} ${r.source_version} -> ${r.target_version}, ${statusText(r)}, ${r.succeeded_nodes}/${r.total_nodes} succeeded`
    return { action: `${ACTION_WORDS[action]} rollout ${r.id} (${what})`, consequence }
  })
}

export async function sendRolloutAction(api: ApiClient, id: string, action: RolloutAction): Promise<SignalledRolloutView> {
  return api.post<SignalledRolloutView>(`/rollouts/${encodeURIComponent(id)}/${action}`, {}).catch(rolloutNotFound(id))
}

export interface FollowOptions {
  interval: string
  json: boolean
  log: (line: string) => void
  /** The rollout's version as the API answered this command's signal (see watchIsOver). */
  signalledAt?: number
}

/**
 * Follows the rollout until it ends or waits for an operator, shows it, and sets the exit code
 * a CI pipeline branches on (docs/cli.md, "Rollouts"). Returns the final rollout.
 */
export async function followRollout(api: ApiClient, id: string, options: FollowOptions): Promise<RolloutDetailView> {
  const intervalMs = parseInterval(options.interval)
  let final: RolloutSnapshot
  if (options.json) {
    final = await watchRollout(api, id, { intervalMs, signalledAt: options.signalledAt, onSnapshot: () => undefined })
  } else if (process.stdout.isTTY) {
    // The live view (and react, ink) only for a terminal: scripts and --json never load it.
    const { startLiveView } = await import('./rollout-live.js')
    const live = await startLiveView(intervalMs)
    try {
      final = await watchRollout(api, id, { intervalMs, signalledAt: options.signalledAt, onSnapshot: (s) => live.update(s) })
    } finally {
      await live.stop()
    }
  } else {
    let previous: RolloutSnapshot | undefined
    final = await watchRollout(api, id, {
      intervalMs,
      signalledAt: options.signalledAt,
      onSnapshot: (s) => {
        for (const line of changeLines(previous, s)) options.log(line)
        previous = s
      },
    })
  }
  if (!options.json) for (const line of finalLines(final.rollout)) options.log(line)
  process.exitCode = outcomeExitCode(rolloutOutcome(final.rollout))
  return final.rollout
}

/** An action command's body: confirm if destructive, send, say what happens, follow with --watch. */
export async function runRolloutAction(
  api: ApiClient,
  action: RolloutAction,
  flags: { id: string; watch: boolean; interval: string; yes?: boolean },
  out: { json: boolean; log: (line: string) => void; confirm?: string },
): Promise<SignalledRolloutView | RolloutDetailView> {
  // A bad --interval is a usage error before anything is sent.
  if (flags.watch) parseInterval(flags.interval)
  if (out.confirm !== undefined) await confirmRolloutAction(api, flags.id, action, out.confirm, flags.yes ?? false)
  const answered = await sendRolloutAction(api, flags.id, action)
  if (!out.json) out.log(answered.changed ? describeSignal(action, answered, !flags.watch) : repeatNote(action, answered))
  if (!flags.watch) return answered
  // start moves the status itself; a signal is acted on later by the workflow; a repeat moves nothing.
  const signalled = action !== 'start' && answered.changed
  return followRollout(api, answered.id, { interval: flags.interval, json: out.json, log: out.log, ...(signalled ? { signalledAt: answered.version } : {}) })
}

/** `Rollout 0193… was already paused; nothing changed.`, in the rule's own words. */
function repeatNote(action: RolloutAction, r: SignalledRolloutView): string {
  const verdict = judgeRolloutSignal(r, SIGNALS[action])
  return alreadyNote(`Rollout ${r.id}`, verdict.kind === 'repeat' ? verdict.already : r.status)
}
