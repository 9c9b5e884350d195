/**
 * Uptime as the API reads it (spec: "reads sum pre-computed buckets"): the hours of a window come
 * from the worker's complete buckets. Every hour after a node's last complete bucket — the current
 * hour, the hour that just ended until the worker finalises it (up to one worker interval plus the
 * settle time), and any hour a stopped worker has not reached — is computed from the state log at
 * read time, so the figure includes what happened minutes ago and never sums a stale bucket.
 *
 * A window is whole hours ending with the current one: `24h` is the current (partial) hour and
 * the 23 hours before it, so it starts on an hour boundary and the history's periods add up to
 * exactly the summary.
 */
import type { Queryable } from '../db/knex.js'
import { toBool, toDate, toDateOrNull } from '../db/dialect.js'
import { addSeconds, computeHourlyBuckets, DAY_MS, emptySeconds, floorDay, floorHour, HOUR_MS, uptimePercentage, type UptimeSeconds } from './compute.js'
import { BUCKETS_TABLE, readIntervals } from './rollup.js'
import { UPTIME_GRANULARITIES, UPTIME_WINDOWS, type UptimeGranularity, type UptimeWindow } from './windows.js'

export { UPTIME_GRANULARITIES, UPTIME_WINDOWS, type UptimeGranularity, type UptimeWindow }

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
  /** downtime_seconds less planned_downtime_seconds: what the operator did not plan. */
  unplanned_downtime_seconds: number
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
  return { ...seconds, unplanned_downtime_seconds: seconds.downtime_seconds - seconds.planned_downtime_seconds, uptime_percentage: uptimePercentage(seconds) }
}

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v))

/**
 * The first hour of the window a node's buckets do not settle: the hour after its last complete
 * bucket, or its first incomplete one if that is earlier (the worker never leaves one behind a
 * complete one, but a bucket marked incomplete by hand is redone). No bucket at all: the window.
 */
function liveFromHour(bounds: WindowBounds, lastComplete: Date | null, firstIncomplete: Date | null): number {
  let from = lastComplete ? lastComplete.getTime() + HOUR_MS : bounds.startMs
  if (firstIncomplete) from = Math.min(from, firstIncomplete.getTime())
  return Math.min(Math.max(from, bounds.startMs), bounds.currentHourMs)
}

/**
 * Each node's hours from its `from` hour up to now, computed from its log (nodes without log rows
 * are absent). One log read per distinct `from`: usually one or two (the current hour; the
 * previous one in the minutes before the worker finalises it).
 */
async function liveHours(db: Queryable, fromByNode: ReadonlyMap<string, number>, end: Date): Promise<Map<string, Map<number, UptimeSeconds>>> {
  const groups = new Map<number, string[]>()
  for (const [nodeId, from] of fromByNode) {
    let list = groups.get(from)
    if (!list) groups.set(from, (list = []))
    list.push(nodeId)
  }
  const out = new Map<string, Map<number, UptimeSeconds>>()
  for (const [from, nodeIds] of groups) {
    const intervals = await readIntervals(db, nodeIds, new Date(from), end)
    for (const [nodeId, list] of intervals) {
      const hours = new Map<number, UptimeSeconds>()
      for (const bucket of computeHourlyBuckets(list, { nodeId, fromHourMs: from, now: end })) {
        const { uptime_seconds, downtime_seconds, planned_downtime_seconds, unknown_seconds, total_seconds } = bucket
        hours.set(bucket.bucket_hour.getTime(), { uptime_seconds, downtime_seconds, planned_downtime_seconds, unknown_seconds, total_seconds })
      }
      out.set(nodeId, hours)
    }
  }
  return out
}

/**
 * Rolling summary of one node: one query finding where its complete buckets end, one summing
 * them, one read of its log for the hours after them (the current hour, and the last one until
 * the worker has finalised it).
 */
export async function readUptimeSummary(db: Queryable, nodeId: string, window: UptimeWindow, now: Date): Promise<UptimeSummary> {
  const bounds = windowBounds(window, now)
  const inWindow = () =>
    db(BUCKETS_TABLE).where('node_id', nodeId).where('bucket_hour', '>=', new Date(bounds.startMs)).where('bucket_hour', '<', new Date(bounds.currentHourMs))
  const edges = (await inWindow()
    .select(
      db.raw('MAX(CASE WHEN is_complete = true THEN bucket_hour END) AS last_complete'),
      db.raw('MIN(CASE WHEN is_complete = false THEN bucket_hour END) AS first_incomplete'),
    )
    .first()) as Record<string, unknown> | undefined
  const liveFrom = liveFromHour(bounds, toDateOrNull(edges?.last_complete), toDateOrNull(edges?.first_incomplete))
  const seconds = emptySeconds()
  if (liveFrom > bounds.startMs) {
    const row = (await inWindow()
      .where('bucket_hour', '<', new Date(liveFrom))
      .sum({ up: 'uptime_seconds', down: 'downtime_seconds', planned: 'planned_downtime_seconds', unknown: 'unknown_seconds', total: 'total_seconds' })
      .first()) as Record<string, unknown> | undefined
    addSeconds(seconds, { uptime_seconds: num(row?.up), downtime_seconds: num(row?.down), planned_downtime_seconds: num(row?.planned), unknown_seconds: num(row?.unknown), total_seconds: num(row?.total) })
  }
  const live = (await liveHours(db, new Map([[nodeId, liveFrom]]), bounds.end)).get(nodeId)
  for (const hour of live?.values() ?? []) addSeconds(seconds, hour)
  return { node_id: nodeId, window, window_start: new Date(bounds.startMs).toISOString(), window_end: now.toISOString(), ...figures(seconds) }
}

/**
 * Every hour of the window for each node (hours without a bucket or log are zero): complete
 * buckets as the worker wrote them, every hour after a node's last one from its log.
 */
export async function readUptimeHours(db: Queryable, nodeIds: readonly string[], window: UptimeWindow, now: Date): Promise<Map<string, Map<number, UptimeSeconds>>> {
  const bounds = windowBounds(window, now)
  const out = new Map<string, Map<number, UptimeSeconds>>(nodeIds.map((id) => [id, new Map()]))
  if (nodeIds.length === 0) return out
  const rows = (await db(BUCKETS_TABLE)
    .select('node_id', 'bucket_hour', 'uptime_seconds', 'downtime_seconds', 'planned_downtime_seconds', 'unknown_seconds', 'total_seconds', 'is_complete')
    .whereIn('node_id', nodeIds)
    .where('bucket_hour', '>=', new Date(bounds.startMs))
    .where('bucket_hour', '<', new Date(bounds.currentHourMs))) as Record<string, unknown>[]
  const lastComplete = new Map<string, number>()
  const firstIncomplete = new Map<string, number>()
  for (const r of rows) {
    const nodeId = String(r.node_id)
    const hour = toDate(r.bucket_hour).getTime()
    if (toBool(r.is_complete)) lastComplete.set(nodeId, Math.max(lastComplete.get(nodeId) ?? -Infinity, hour))
    else firstIncomplete.set(nodeId, Math.min(firstIncomplete.get(nodeId) ?? Infinity, hour))
    out.get(nodeId)?.set(hour, {
      uptime_seconds: num(r.uptime_seconds),
      downtime_seconds: num(r.downtime_seconds),
      planned_downtime_seconds: num(r.planned_downtime_seconds),
      unknown_seconds: num(r.unknown_seconds),
      total_seconds: num(r.total_seconds),
    })
  }
  const fromByNode = new Map<string, number>()
  for (const nodeId of nodeIds) {
    const last = lastComplete.get(nodeId)
    const incomplete = firstIncomplete.get(nodeId)
    const from = liveFromHour(bounds, last === undefined ? null : new Date(last), incomplete === undefined ? null : new Date(incomplete))
    fromByNode.set(nodeId, from)
    // What the log says replaces the buckets from there on, an hour without log rows included.
    const hours = out.get(nodeId)
    for (const hour of hours?.keys() ?? []) if (hour >= from) hours?.delete(hour)
  }
  for (const [nodeId, hours] of await liveHours(db, fromByNode, bounds.end)) {
    for (const [hour, seconds] of hours) out.get(nodeId)?.set(hour, seconds)
  }
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
