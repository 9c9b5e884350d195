/**
 * What the human output may assume about where it goes (docs/cli.md, "Output"): its width, whether
 * it may colour, whether ids may be shortened. A terminal gets short ids, tables fitted to its
 * width and coloured states; a pipe gets whole ids and whole cells, uncoloured, so `grep` and
 * `awk` see everything (scripts should still prefer `--json`). `--wide` turns fitting and short
 * ids off anywhere; `NO_COLOR` (any non-empty value) and `TERM=dumb` turn colour off.
 */

export type Tone = 'red' | 'yellow' | 'green' | 'cyan' | 'gray'

/** `--wide`, set once when the command's flags are parsed. */
let wide = false

export function setWide(value: boolean): void {
  wide = value
}

interface Stream {
  isTTY?: boolean
  columns?: number
}

export interface Output {
  /** Columns to fit in; undefined: do not cut. */
  width: number | undefined
  colour: boolean
  shortIds: boolean
}

export function colourAllowed(stream: Stream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(stream.isTTY) && !env.NO_COLOR && env.TERM !== 'dumb'
}

export function output(stream: Stream = process.stdout, env: NodeJS.ProcessEnv = process.env): Output {
  const tty = Boolean(stream.isTTY)
  const fromEnv = Number(env.COLUMNS)
  const columns = Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : tty && stream.columns ? stream.columns : undefined
  return { width: wide ? undefined : columns, colour: colourAllowed(stream, env), shortIds: tty && !wide }
}

/**
 * The tone of a state word, by the first word of the cell (`open (flapping)`): what is broken in
 * red, what needs watching in yellow, what is well in green.
 */
const TONES: Record<string, Tone> = {
  down: 'red',
  critical: 'red',
  failed: 'red',
  failed_rollback: 'red',
  provision_failed: 'red',
  unhealthy: 'red',
  degraded: 'yellow',
  syncing: 'yellow',
  lagging: 'yellow',
  paused: 'yellow',
  warning: 'yellow',
  maintenance: 'yellow',
  migrating: 'yellow',
  provisioning: 'yellow',
  grace_period: 'yellow',
  healthy: 'green',
  synced: 'green',
  active: 'green',
  completed: 'green',
  succeeded: 'green',
  resolved: 'green',
  auto_resolved: 'green',
}

export function toneOf(state: string): Tone | undefined {
  return TONES[state.split(/[\s(,]/, 1)[0] ?? '']
}

const SGR: Record<Tone, [number, number]> = { red: [31, 39], yellow: [33, 39], green: [32, 39], cyan: [36, 39], gray: [90, 39] }

export function paint(text: string, tone: Tone | undefined, colour: boolean): string {
  if (!colour || tone === undefined || text.length === 0) return text
  const [on, off] = SGR[tone]
  return `\u001b[${on}m${text}\u001b[${off}m`
}
