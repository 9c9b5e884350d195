/**
 * Time as an operator reads it in tables and views: ages (`45s ago`, `3d ago`), durations
 * (`took 2m10s`) and what is ahead (`in 4m`). Full ISO timestamps stay in `--json`.
 * `precise` keeps two units (`2m10s ago`) where seconds matter (heartbeats, workflow steps);
 * otherwise one unit is enough to see how old a thing is.
 */

const UNITS: readonly [string, number][] = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1_000],
]

/** Past this, an age is a date: "412d ago" says less than the day itself. */
const DATE_AFTER_MS = 90 * 86_400_000

/** A length of time: `45s`, `2m10s` (precise) or `2m`, `3d4h` or `3d`; under a second `350ms`. */
export function span(ms: number, precise = true): string {
  const abs = Math.abs(ms)
  if (abs < 1_000) return precise ? `${Math.round(abs)}ms` : '0s'
  const first = UNITS.findIndex(([, size]) => abs >= size)
  const parts: string[] = []
  let rest = abs
  for (const [unit, size] of UNITS.slice(first, first + (precise ? 2 : 1))) {
    const n = Math.floor(rest / size)
    rest -= n * size
    if (n > 0) parts.push(`${n}${unit}`)
  }
  return parts.join('')
}

function parse(iso: string | null | undefined): number | null {
  if (!iso) return null
  const at = Date.parse(iso)
  return Number.isNaN(at) ? null : at
}

/** `2026-11-21 23:00:05Z` (seconds), for when an age alone is not enough. */
export function stamp(iso: string): string {
  return `${new Date(iso).toISOString().slice(0, 19).replace('T', ' ')}Z`
}

/** How long ago (`45s ago`), or how far ahead (`in 4m`); a very old one as its date; null -> `fallback`. */
export function age(iso: string | null | undefined, options: { now?: Date; precise?: boolean; fallback?: string } = {}): string {
  const at = parse(iso)
  if (at === null) return iso ? String(iso) : (options.fallback ?? '-')
  const diff = (options.now ?? new Date()).getTime() - at
  if (Math.abs(diff) > DATE_AFTER_MS) return new Date(at).toISOString().slice(0, 10)
  if (diff >= 0 && diff < 1_000) return 'just now'
  const text = span(diff, options.precise ?? false)
  return diff >= 0 ? `${text} ago` : `in ${text}`
}

/** For one-object views: `45s ago (2026-11-21 23:00:05Z)`. */
export function moment(iso: string | null | undefined, options: { now?: Date; fallback?: string } = {}): string {
  const at = parse(iso)
  if (at === null || !iso) return age(iso, options)
  return `${age(iso, { ...options, precise: true })} (${stamp(iso)})`
}

/** A step's or a run's length: `2m10s`; still running: `2m10s so far`; never started: `-`. */
export function took(startIso: string | null | undefined, endIso: string | null | undefined, now: Date = new Date()): string {
  const start = parse(startIso)
  if (start === null) return '-'
  const end = parse(endIso)
  return end === null ? `${span(now.getTime() - start)} so far` : span(end - start)
}

/** A time ahead with what is left of it: `2026-11-27 12:04:05Z (4m10s left)`; none: `-`. */
export function ahead(iso: string | null | undefined, now: Date = new Date()): string {
  return iso && parse(iso) !== null ? `${stamp(iso)} (${remaining(iso, now)})` : '-'
}

/** What is ahead: `4m10s left` (precise), or `due` once passed. */
export function remaining(iso: string | null | undefined, now: Date = new Date()): string {
  const at = parse(iso)
  if (at === null) return '-'
  const left = at - now.getTime()
  return left <= 0 ? 'due' : `${span(left)} left`
}
