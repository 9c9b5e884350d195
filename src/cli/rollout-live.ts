/**
 * The live terminal view of `rollout status --watch` (ink, createElement rather than JSX so the
 * build needs no JSX settings): the rollout's status and counters, its batches with each node's
 * status and upgrade_phase, the canary gate, why it is paused, and the commands that apply now.
 */
import { createElement as h, type ReactElement } from 'react'
import type { RolloutNodeView } from '../rollouts/views.js'
import { batchText, describeState, nextActions, statusText } from './rollout-views.js'
import type { RolloutSnapshot } from './rollout-watch.js'
import { batchNumber, canaryGate, healthWaitText, type CanaryGate } from './rollout-waits.js'
import { colourAllowed } from './terminal.js'

/** Node rows shown per batch, and batches shown around the current one: a fleet of thousands stays one screen. */
const NODES_PER_BATCH = 8
const BATCHES_AROUND = 3

const STATUS_COLOURS: Record<string, string> = {
  completed: 'green',
  succeeded: 'green',
  running: 'cyan',
  in_progress: 'cyan',
  validating: 'blue',
  scheduled: 'blue',
  pending: 'gray',
  skipped: 'gray',
  paused: 'yellow',
  rolled_back: 'magenta',
  cancelled: 'magenta',
  failed: 'red',
}

const GATE_TONES: Partial<Record<CanaryGate, string>> = { awaiting_approval: 'yellow', canary_failed: 'red', approved: 'green' }

type Ink = Pick<typeof import('ink'), 'Box' | 'Text'>

/** The view's colours; none under NO_COLOR (ink's chalk does not read it) or TERM=dumb. */
interface Paint {
  colour: (status: string) => string | undefined
  tone: (name: string) => string | undefined
}

function paintFor(colours: boolean): Paint {
  return colours ? { colour: (status) => STATUS_COLOURS[status] ?? 'white', tone: (name) => name || undefined } : { colour: () => undefined, tone: () => undefined }
}

interface Batch {
  index: number
  nodes: RolloutNodeView[]
}

function batchesOf(nodes: readonly RolloutNodeView[]): Batch[] {
  const byIndex = new Map<number, RolloutNodeView[]>()
  for (const n of nodes) byIndex.set(n.batch_index, [...(byIndex.get(n.batch_index) ?? []), n])
  return [...byIndex.entries()].sort(([a], [b]) => a - b).map(([index, list]) => ({ index, nodes: list }))
}

function countsText(nodes: readonly RolloutNodeView[]): string {
  const counts = new Map<string, number>()
  for (const n of nodes) counts.set(n.status, (counts.get(n.status) ?? 0) + 1)
  return [...counts.entries()].map(([status, n]) => `${n} ${status}`).join(', ')
}

/** Nodes worth a row: the ones moving or failed first, then the rest, capped. */
function visibleNodes(nodes: readonly RolloutNodeView[]): { shown: RolloutNodeView[]; hidden: number } {
  const rank = (n: RolloutNodeView) => (n.status === 'in_progress' || n.status === 'validating' ? 0 : n.status === 'failed' ? 1 : 2)
  const sorted = [...nodes].sort((a, b) => rank(a) - rank(b))
  return { shown: sorted.slice(0, NODES_PER_BATCH), hidden: Math.max(0, sorted.length - NODES_PER_BATCH) }
}

function batchView({ Box, Text }: Ink, paint: Paint, r: RolloutSnapshot['rollout'], batch: Batch, canary: boolean, at: Date): ReactElement {
  const { shown, hidden } = visibleNodes(batch.nodes)
  return h(
    Box,
    { key: `batch-${batch.index}`, flexDirection: 'column' },
    h(Text, null, h(Text, { bold: true }, `  batch ${batchNumber(batch.index)}${canary ? ' (canary)' : ''}`), h(Text, { dimColor: true }, `  ${countsText(batch.nodes)}`)),
    ...shown.map((n) =>
      h(
        Text,
        { key: n.node_id },
        `    ${n.node_id}  `,
        h(Text, { color: paint.colour(n.status) }, n.status.padEnd(11)),
        ` ${n.upgrade_phase ?? '-'}${n.attempt_count > 1 ? ` (attempt ${n.attempt_count})` : ''}`,
        n.status === 'failed' && n.error_message ? h(Text, { color: paint.tone('red') }, `  ${n.error_message}`) : null,
        n.status === 'validating' ? h(Text, { color: paint.tone('yellow') }, `  ${healthWaitText(r, n, at) ?? ''}`) : null,
      ),
    ),
    ...(hidden > 0 ? [h(Text, { key: 'more', dimColor: true }, `    … ${hidden} more`)] : []),
  )
}

export function rolloutLiveView(ink: Ink, snapshot: RolloutSnapshot, intervalMs: number, at: Date = new Date(), colours = colourAllowed()): ReactElement {
  const { Box, Text } = ink
  const paint = paintFor(colours)
  const r = snapshot.rollout
  const batches = batchesOf(snapshot.nodes)
  const current = r.current_batch ?? 0
  const near = batches.filter((b) => Math.abs(b.index - current) <= BATCHES_AROUND)
  const earlier = batches.filter((b) => b.index < current - BATCHES_AROUND)
  const later = batches.filter((b) => b.index > current + BATCHES_AROUND)
  const state = describeState(r)
  const actions = nextActions(r)
  const gate = canaryGate(r, snapshot.nodes, at)
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { bold: true }, `Rollout ${r.id}`),
    h(Text, null, `${r.chain_profile_id}/${r.node_type}  ${r.binary_name} ${r.source_version} -> ${r.target_version}  ${r.strategy}${r.migration_type === 'breaking' ? ', breaking' : ''}`),
    h(
      Text,
      null,
      'Status: ',
      h(Text, { color: paint.colour(r.status), bold: true }, statusText(r)),
      `   ${batchText(r)}   `,
      h(Text, { color: paint.tone('green') }, `${r.succeeded_nodes} succeeded`),
      ', ',
      h(Text, { color: r.failed_nodes > 0 ? paint.tone('red') : undefined }, `${r.failed_nodes} failed`),
      ` of ${r.total_nodes}${r.forced ? '  (threshold forced)' : ''}`,
    ),
    ...(state ? [h(Text, { color: paint.tone(r.status === 'failed' ? 'red' : 'yellow') }, `  ${state}`)] : []),
    ...(batches.length > 0 ? [h(Text, { bold: true }, 'Batches')] : []),
    ...(earlier.length > 0 ? [h(Text, null, `  … batches 1-${batchNumber(earlier.at(-1)?.index ?? 0)}: ${countsText(earlier.flatMap((b) => b.nodes))}`)] : []),
    ...near.map((b) => batchView(ink, paint, r, b, r.strategy === 'canary' && b.index === 0, at)),
    ...(later.length > 0 ? [h(Text, null, `  … ${later.length} more batches: ${countsText(later.flatMap((b) => b.nodes))}`)] : []),
    ...(r.strategy === 'canary' && r.batch_count !== null
      ? [h(Text, null, 'Canary gate: ', h(Text, { color: paint.tone(GATE_TONES[gate.gate] ?? ''), bold: gate.gate === 'awaiting_approval' }, gate.text))]
      : []),
    ...(actions.length > 0 ? [h(Text, { bold: true }, 'Next'), ...actions.map((a) => h(Text, { key: a }, `  ${a}`))] : []),
    h(Text, null, `updated ${at.toISOString().slice(11, 19)}Z, every ${intervalMs / 1000}s; Ctrl-C stops watching (the rollout goes on)`),
  )
}

export interface LiveView {
  update: (snapshot: RolloutSnapshot) => void
  stop: () => Promise<void>
}

export async function startLiveView(intervalMs: number, stdout: NodeJS.WriteStream = process.stdout, colours = colourAllowed(stdout)): Promise<LiveView> {
  // ink is loaded only when a terminal shows it (it is heavy, and scripts never need it).
  const ink = await import('ink')
  let app: ReturnType<typeof ink.render> | undefined
  return {
    update(snapshot) {
      const view = rolloutLiveView(ink, snapshot, intervalMs, new Date(), colours)
      if (app) app.rerender(view)
      else app = ink.render(view, { stdout, patchConsole: false, exitOnCtrlC: false })
    },
    async stop() {
      if (!app) return
      // ink creates the exit promise on the first waitUntilExit(): ask before unmounting, or it never settles.
      const exited = app.waitUntilExit()
      app.unmount()
      await exited
    },
  }
}
