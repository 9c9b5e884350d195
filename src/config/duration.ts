const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const

/**
 * Parses duration strings such as `250ms`, `30s`, `5m`, `1h30m`, `7d`. Returns milliseconds,
 * or null when the text is not a duration.
 */
export function parseDuration(text: string): number | null {
  const trimmed = text.trim()
  if (trimmed.length === 0) return null
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy
  let total = 0
  let consumed = 0
  for (let match = re.exec(trimmed); match; match = re.exec(trimmed)) {
    total += Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
    consumed = re.lastIndex
  }
  return consumed === trimmed.length ? Math.round(total) : null
}
