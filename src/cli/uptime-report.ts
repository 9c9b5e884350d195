/**
 * `nodeplane uptime report`: what it fetches, its `--json` contract, the `--min` check and the
 * plain-text rendering (the TTY view in uptime-view.ts draws the same rows with colour).
 */
import type { UptimeFigures, UptimePeriod, UptimeSummary, UptimeHistory, UptimeWindow } from '../uptime/reads.js'
import type { NodeView } from '../nodes/views.js'
import type { ApiClient } from './api-client.js'
import { renderTable } from './display.js'
import { span } from './human-time.js'
import { listAll } from './pages.js'

/** Exit code when `--min` is given and a node is below it (docs/cli.md, Exit codes). */
export const EXIT_BELOW_MINIMUM = 5

export const REPORT_WINDOWS: readonly UptimeWindow[] = ['24h', '7d', '30d']

export interface NodeUptimeRow {
  node_id: string
  chain_profile_id: string
  node_type: string
  state: string
  windows: Record<UptimeWindow, UptimeFigures & { window_start: string }>
  daily: UptimePeriod[]
}

export interface UptimeReport {
  generated_at: string
  nodes: NodeUptimeRow[]
  /** Present with --min: the threshold, the window it applies to and the nodes below it. */
  check?: { min: number; window: UptimeWindow; below: string[] }
}

/** One node through the spec's endpoints: the node, its three summaries and 30 days by day. */
export async function fetchNodeReport(api: ApiClient, nodeId: string): Promise<NodeUptimeRow> {
  const id = encodeURIComponent(nodeId)
  const node = await api.get<NodeView>(`/nodes/${id}`)
  const windows = {} as NodeUptimeRow['windows']
  for (const window of REPORT_WINDOWS) {
    const { node_id: _n, window: _w, window_end: _e, ...rest } = await api.get<UptimeSummary>(`/nodes/${id}/uptime`, { window })
    windows[window] = rest
  }
  const history = await api.get<UptimeHistory>(`/nodes/${id}/uptime/history`, { window: '30d', granularity: 'daily' })
  return { node_id: node.id, chain_profile_id: node.chain_profile_id, node_type: node.node_type, state: node.state, windows, daily: history.periods }
}

/** Every node the caller may see (every node for an admin), through `GET /api/v1/uptime`. */
export async function fetchFleetReport(api: ApiClient, options: { userId?: string | undefined; limit?: number | undefined }): Promise<NodeUptimeRow[]> {
  const path = options.userId ? `/uptime?user_id=${encodeURIComponent(options.userId)}` : '/uptime'
  const items = await listAll<NodeUptimeRow & { subscription_id?: string; display_state?: string }>(api, path, options.limit)
  return items.map(({ node_id, chain_profile_id, node_type, state, windows, daily }) => ({ node_id, chain_profile_id, node_type, state, windows, daily }))
}

/** Nodes whose figure in `window` is below `min`; a node with no up or down time is not. */
export function nodesBelow(nodes: readonly NodeUptimeRow[], min: number, window: UptimeWindow): string[] {
  return nodes.filter((n) => {
    const pct = n.windows[window].uptime_percentage
    return pct !== null && pct < min
  }).map((n) => n.node_id)
}

export function formatPercentage(pct: number | null): string {
  return pct === null ? 'no data' : `${pct.toFixed(3)}%`
}

export function renderUptimeTable(nodes: readonly NodeUptimeRow[]): string {
  return renderTable(nodes, [
    { header: 'node', value: (n) => n.node_id },
    { header: 'chain', value: (n) => n.chain_profile_id },
    { header: 'state', value: (n) => n.state },
    ...REPORT_WINDOWS.map((w) => ({ header: w, value: (n: NodeUptimeRow) => formatPercentage(n.windows[w].uptime_percentage) })),
    // The 30 days' downtime, split: the percentages above count both (the SLA figure).
    { header: 'planned 30d', value: (n) => downtime(n.windows['30d'].planned_downtime_seconds) },
    { header: 'unplanned 30d', value: (n) => downtime(n.windows['30d'].unplanned_downtime_seconds) },
  ])
}

/** Seconds of downtime as `1h30m`, `0s` for none. */
export function downtime(seconds: number): string {
  return seconds === 0 ? '0s' : span(seconds * 1000)
}

export interface DayBar {
  day: string
  /** The last day of a run of days without data shown as this one line (absent: one day). */
  until?: string
  /** Days in the line: 1, or the length of a run without data. */
  days: number
  percentage: number | null
  /** Filled cells out of `width`. */
  filled: number
  width: number
}

/**
 * The days of the chart: one node's, or the fleet's (every node's seconds added up per day).
 * Consecutive days without data (nothing counted up or down: before a node existed, or only
 * syncing) are one line, so a new node's chart is not a month of empty bars.
 */
export function dailyBars(nodes: readonly NodeUptimeRow[], width = 40): DayBar[] {
  const days = new Map<string, { up: number; down: number }>()
  for (const node of nodes) {
    for (const period of node.daily) {
      const day = period.period_start.slice(0, 10)
      const sum = days.get(day) ?? { up: 0, down: 0 }
      sum.up += period.uptime_seconds
      sum.down += period.downtime_seconds
      days.set(day, sum)
    }
  }
  const bars: DayBar[] = []
  for (const [day, s] of [...days.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    const counted = s.up + s.down
    const percentage = counted === 0 ? null : Math.floor((s.up * 100_000) / counted) / 1_000
    const last = bars.at(-1)
    if (percentage === null && last && last.percentage === null) {
      last.until = day
      last.days++
      continue
    }
    bars.push({ day, days: 1, percentage, width, filled: percentage === null ? 0 : Math.floor((percentage / 100) * width) })
  }
  return bars
}

/** The day column: one day, or the first and last of a run without data. */
export function dayLabel(bar: DayBar): string {
  return bar.until ? `${bar.day} to ${bar.until}` : bar.day
}

export function chartTitle(nodes: readonly NodeUptimeRow[]): string {
  const first = nodes[0]
  const who = nodes.length === 1 && first ? `node ${first.node_id}` : `${nodes.length} nodes together`
  return `Uptime per UTC day, last 30 days (${who})`
}

export function barText(bar: DayBar): string {
  if (bar.until) return `${dayLabel(bar)}  no data (${bar.days} days)`
  if (bar.percentage === null) return `${bar.day}  ${' '.repeat(bar.width)}  no data`
  return `${bar.day}  ${'█'.repeat(bar.filled)}${'░'.repeat(bar.width - bar.filled)}  ${formatPercentage(bar.percentage)}`
}

export function renderUptimeReport(report: UptimeReport): string {
  if (report.nodes.length === 0) return 'No nodes yet: a node is created when a subscription is paid.'
  const lines = [renderUptimeTable(report.nodes), '', chartTitle(report.nodes), ...dailyBars(report.nodes).map(barText)]
  if (report.check) lines.push('', describeCheck(report.check))
  return lines.join('\n')
}

export function describeCheck(check: NonNullable<UptimeReport['check']>): string {
  if (check.below.length === 0) return `Every node is at or above ${check.min}% over ${check.window}.`
  return `${check.below.length} node(s) below ${check.min}% over ${check.window}: ${check.below.join(', ')}`
}
