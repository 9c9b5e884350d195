/**
 * The pure part of uptime: a node's state-log intervals -> hourly buckets. No I/O, no clock:
 * `now` is passed in. Times are cut to whole seconds first, so a bucket's up, down and unknown
 * seconds always add up to its total exactly.
 */
import { classOfState, isPlannedDowntime, PROVISIONING_GRACE_MS, type UptimeClass } from './classification.js'

export const HOUR_MS = 3_600_000
export const DAY_MS = 24 * HOUR_MS

export interface LogInterval {
  state: string
  entered_at: Date
  /** null: the node is still in this state (the interval runs to `now`). */
  exited_at: Date | null
  /** Who made the change (the state log's trigger): planned maintenance is a rollout's. */
  trigger?: string
}

export interface UptimeSeconds {
  uptime_seconds: number
  downtime_seconds: number
  /** The part of downtime_seconds that was planned maintenance (a rollout the operator started). */
  planned_downtime_seconds: number
  unknown_seconds: number
  total_seconds: number
}

export interface HourlyBucket extends UptimeSeconds {
  node_id: string
  bucket_hour: Date
  is_complete: boolean
}

export function floorHour(ms: number): number {
  return Math.floor(ms / HOUR_MS) * HOUR_MS
}

export function floorDay(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS
}

export function emptySeconds(): UptimeSeconds {
  return { uptime_seconds: 0, downtime_seconds: 0, planned_downtime_seconds: 0, unknown_seconds: 0, total_seconds: 0 }
}

export function addSeconds(into: UptimeSeconds, add: UptimeSeconds): UptimeSeconds {
  into.uptime_seconds += add.uptime_seconds
  into.downtime_seconds += add.downtime_seconds
  into.planned_downtime_seconds += add.planned_downtime_seconds
  into.unknown_seconds += add.unknown_seconds
  into.total_seconds += add.total_seconds
  return into
}

/**
 * up / (up + down) as a percentage, cut (never rounded up) to three decimals; null when nothing
 * counted either way. Unknown time is left out rather than counted for or against.
 */
export function uptimePercentage(s: UptimeSeconds): number | null {
  const counted = s.uptime_seconds + s.downtime_seconds
  if (counted === 0) return null
  return Math.floor((s.uptime_seconds * 100_000) / counted) / 1_000
}

interface Segment {
  cls: Exclude<UptimeClass, 'none'>
  planned?: boolean
  /** Whole seconds since the epoch, [start, end). */
  start: number
  end: number
}

const sec = (ms: number): number => Math.floor(ms / 1000)

/** One interval as classified stretches, cut at `nowMs`; provisioning splits at its grace. */
function segmentsOf(interval: LogInterval, nowMs: number): Segment[] {
  const start = interval.entered_at.getTime()
  const end = Math.min(interval.exited_at?.getTime() ?? nowMs, nowMs)
  if (end <= start) return []
  const cls = classOfState(interval.state)
  if (cls === 'none') return []
  if (interval.state === 'provisioning') {
    const graceEnd = Math.min(start + PROVISIONING_GRACE_MS, end)
    const out: Segment[] = [{ cls: 'up', start: sec(start), end: sec(graceEnd) }]
    if (end > graceEnd) out.push({ cls: 'down', start: sec(graceEnd), end: sec(end) })
    return out
  }
  return [{ cls, start: sec(start), end: sec(end), ...(isPlannedDowntime(interval.state, interval.trigger) ? { planned: true } : {}) }]
}

export interface ComputeOptions {
  nodeId: string
  /** First hour to produce (epoch ms, on an hour boundary). */
  fromHourMs: number
  now: Date
  /** An hour is complete once it ended at least this long before `now` (late commits settle). */
  settleMs?: number
}

/**
 * Hourly buckets of one node from `fromHourMs` up to the hour containing `now`. Hours before
 * the node's first interval, and after it entered a terminal state, get no bucket. Intervals
 * may come in any order and may start before `fromHourMs`.
 */
export function computeHourlyBuckets(intervals: readonly LogInterval[], options: ComputeOptions): HourlyBucket[] {
  const nowMs = options.now.getTime()
  const settleMs = options.settleMs ?? 0
  const currentHour = floorHour(nowMs)
  if (intervals.length === 0) return []

  let firstMs = Infinity
  let terminalMs = Infinity
  for (const i of intervals) {
    firstMs = Math.min(firstMs, i.entered_at.getTime())
    if (classOfState(i.state) === 'none') terminalMs = Math.min(terminalMs, i.entered_at.getTime())
  }
  const fromHour = Math.max(options.fromHourMs, floorHour(firstMs))
  const lastHour = Math.min(currentHour, terminalMs === Infinity ? currentHour : floorHour(terminalMs))
  if (fromHour > lastHour) return []

  const hours = new Map<number, UptimeSeconds>()
  for (let h = fromHour; h <= lastHour; h += HOUR_MS) hours.set(h, emptySeconds())
  const rangeStart = sec(fromHour)
  const rangeEnd = sec(Math.min(lastHour + HOUR_MS, nowMs))

  for (const interval of intervals) {
    for (const seg of segmentsOf(interval, nowMs)) {
      let s = Math.max(seg.start, rangeStart)
      const e = Math.min(seg.end, rangeEnd)
      while (s < e) {
        const hour = floorHour(s * 1000)
        const cut = Math.min(e, sec(hour + HOUR_MS))
        const bucket = hours.get(hour)
        if (bucket) {
          const n = cut - s
          if (seg.cls === 'up') bucket.uptime_seconds += n
          else if (seg.cls === 'down') {
            bucket.downtime_seconds += n
            if (seg.planned) bucket.planned_downtime_seconds += n
          }
          else bucket.unknown_seconds += n
          bucket.total_seconds += n
        }
        s = cut
      }
    }
  }

  const out: HourlyBucket[] = []
  for (const [hour, seconds] of hours) {
    out.push({ node_id: options.nodeId, bucket_hour: new Date(hour), ...seconds, is_complete: hour + HOUR_MS <= nowMs - settleMs })
  }
  return out
}
