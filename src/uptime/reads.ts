/**
 * Uptime as the API reads it (spec: "reads sum pre-computed buckets"): the hours of a window come
 * from the worker's buckets, except the current hour, which is computed from the state log at
 * read time so the figure includes what happened minutes ago.
 *
 * A window is whole hours ending with the current one: `24h` is the current (partial) hour and
 * the 23 hours before it, so it starts on an hour boundary and the history's periods add up to
 * exactly the summary.
 */
import type { Queryable } from '../db/knex.js'
import { toDate } from '../db/dialect.js'
import { addSeconds, computeHourlyBuckets, DAY_MS, emptySeconds, floorDay, floorHour, HOUR_MS, uptimePercentage, type UptimeSeconds } from './compute.js'
import { BUCKETS_TABLE, readIntervals } from './rollup.js'

export const UPTIME_WINDOWS = ['24h', '7d', '30d'] as const
export type UptimeWindow = (typeof UPTIME_WINDOWS)[number]
export const UPTIME_GRANULARITIES = ['hourly', 'daily'] as const
export type UptimeGranularity = (typeof UPTIME_GRANULARITIES)[number]

const WINDOW_HOURS: Readonly<Record<UptimeWindow, number>> = { '24h': 24, '7d': 7 * 24, '30d': 30 * 24 }

export interface WindowBounds {
  /** First hour of the window (epoch ms). */
  startMs: number
  /** The current hour, computed from the log (epoch ms). */
  currentHourMs: number
  end: Date
}

export function windowBounds(window: UptimeWindow, now: Date): WindowBounds {
  const currentHourMs = floorHour(now.getTime())
  return { startMs: currentHourMs - (WINDOW_HOURS[window] - 1) * HOUR_MS, currentHourMs, end: now }
}

export interface UptimeFigures extends UptimeSeconds {
  /** up / (up + down) x 100, cut to 3 decimals; null when the window holds no up or down time. */
  uptime_percentage: number | null
}

export interface UptimeSummary extends UptimeFigures {
  node_id: string
  window: UptimeWindow
  window_start: string
  window_end: string
}

export interface UptimePeriod extends UptimeFigures {
  period_start: string
  period_end: string
}

export interface UptimeHistory {
  node_id: string
  window: UptimeWindow
  granularity: UptimeGranularity
  window_start: string
  window_end: string
  periods: UptimePeriod[]
}

export function figures(seconds: UptimeSeconds): UptimeFigures {
  return { ...seconds, uptime_percentage: uptimePercentage(seconds) }
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v))

/** The current hour of each node, from its log (nodes without log rows are absent). */
async function currentHours(db: Queryable, nodeIds: readonly string[], bounds: WindowBounds): Promise<Map<string, UptimeSeconds>> {
  const intervals = await readIntervals(db, nodeIds, new Date(bounds.currentHourMs), bounds.end)
  const out = new Map<string, UptimeSeconds>()
  for (const [nodeId, list] of intervals) {
    const [bucket] = computeHourlyBuckets(list, { nodeId, fromHourMs: bounds.currentHourMs, now: bounds.end })
    if (bucket) out.set(nodeId, bucket)
  }
  return out
}

/** Rolling summary of one node: one summing query over its buckets, one read of its log for the current hour. */
export async function readUptimeSummary(db: Queryable, nodeId: string, window: UptimeWindow, now: Date): Promise<UptimeSummary> {
  const bounds = windowBounds(window, now)
  const row = (await db(BUCKETS_TABLE)
    .where('node_id', nodeId)
    .where('bucket_hour', '>=', new Date(bounds.startMs))
    .where('bucket_hour', '<', new Date(bounds.currentHourMs))
    .sum({ up: 'uptime_seconds', down: 'downtime_seconds', unknown: 'unknown_seconds', total: 'total_seconds' })
    .first()) as Record<string, unknown> | undefined
  const seconds: UptimeSeconds = { uptime_seconds: num(row?.up), downtime_seconds: num(row?.down), unknown_seconds: num(row?.unknown), total_seconds: num(row?.total) }
  const current = (await currentHours(db, [nodeId], bounds)).get(nodeId)
  if (current) addSeconds(seconds, current)
  return { node_id: nodeId, window, window_start: new Date(bounds.startMs).toISOString(), window_end: now.toISOString(), ...figures(seconds) }
}

/** Every hour of the window for each node (hours without a bucket are zero). */
export async function readUptimeHours(db: Queryable, nodeIds: readonly string[], window: UptimeWindow, now: Date): Promise<Map<string, Map<number, UptimeSeconds>>> {
  const bounds = windowBounds(window, now)
  const out = new Map<string, Map<number, UptimeSeconds>>(nodeIds.map((id) => [id, new Map()]))
  if (nodeIds.length === 0) return out
  const rows = (await db(BUCKETS_TABLE)
    .select('node_id', 'bucket_hour', 'uptime_seconds', 'downtime_seconds', 'unknown_seconds', 'total_seconds')
    .whereIn('node_id', nodeIds)
    .where('bucket_hour', '>=', new Date(bounds.startMs))
    .where('bucket_hour', '<', new Date(bounds.currentHourMs))) as Record<string, unknown>[]
  for (const r of rows) {
    out.get(String(r.node_id))?.set(toDate(r.bucket_hour).getTime(), {
      uptime_seconds: num(r.uptime_seconds),
      downtime_seconds: num(r.downtime_seconds),
      unknown_seconds: num(r.unknown_seconds),
      total_seconds: num(r.total_seconds),
    })
  }
  for (const [nodeId, current] of await currentHours(db, nodeIds, bounds)) out.get(nodeId)?.set(bounds.currentHourMs, current)
  return out
}

/** The window's hours grouped into periods: every hour, or every UTC day (the first cut at the window's start). */
export function periodsOf(hours: ReadonlyMap<number, UptimeSeconds>, window: UptimeWindow, granularity: UptimeGranularity, now: Date): UptimePeriod[] {
  const bounds = windowBounds(window, now)
  const periods: UptimePeriod[] = []
  let start = bounds.startMs
  while (start <= bounds.currentHourMs) {
    const end = granularity === 'hourly' ? start + HOUR_MS : Math.min(floorDay(start) + DAY_MS, bounds.currentHourMs + HOUR_MS)
    const seconds = emptySeconds()
    for (let h = start; h < end; h += HOUR_MS) {
      const hour = hours.get(h)
      if (hour) addSeconds(seconds, hour)
    }
    periods.push({ period_start: new Date(start).toISOString(), period_end: new Date(Math.min(end, now.getTime())).toISOString(), ...figures(seconds) })
    start = end
  }
  return periods
}

export async function readUptimeHistory(db: Queryable, nodeId: string, window: UptimeWindow, granularity: UptimeGranularity, now: Date): Promise<UptimeHistory> {
  const hours = (await readUptimeHours(db, [nodeId], window, now)).get(nodeId) ?? new Map<number, UptimeSeconds>()
  const bounds = windowBounds(window, now)
  return {
    node_id: nodeId,
    window,
    granularity,
    window_start: new Date(bounds.startMs).toISOString(),
    window_end: now.toISOString(),
    periods: periodsOf(hours, window, granularity, now),
  }
}

/** The three windows of each node plus its daily periods over 30 days, from one read of 30 days of hours. */
export interface NodeUptimeReport {
  windows: Record<UptimeWindow, UptimeFigures & { window_start: string }>
  daily: UptimePeriod[]
}

export async function readUptimeReports(db: Queryable, nodeIds: readonly string[], now: Date): Promise<Map<string, NodeUptimeReport>> {
  const hoursByNode = await readUptimeHours(db, nodeIds, '30d', now)
  const out = new Map<string, NodeUptimeReport>()
  for (const nodeId of nodeIds) {
    const hours = hoursByNode.get(nodeId) ?? new Map<number, UptimeSeconds>()
    const windows = {} as NodeUptimeReport['windows']
    for (const window of UPTIME_WINDOWS) {
      const bounds = windowBounds(window, now)
      const seconds = emptySeconds()
      for (const [hour, s] of hours) if (hour >= bounds.startMs) addSeconds(seconds, s)
      windows[window] = { window_start: new Date(bounds.startMs).toISOString(), ...figures(seconds) }
    }
    out.set(nodeId, { windows, daily: periodsOf(hours, '30d', 'daily', now) })
  }
  return out
}
