/**
 * Benchmark plumbing. Every figure is reported as a ratio against a baseline measured in the
 * same run on the same machine, never as an absolute pass/fail threshold.
 */
export interface BenchFigure {
  name: string
  /** What the figure is measured against, in the same run. */
  baseline: string
  unit: string
  value: number
  baselineValue: number
  /** value / baselineValue for throughputs (higher is better). */
  ratio: number
  aim?: string
  notes?: string
}

export interface BenchContext {
  postgresUrl: string
  natsUrl: string
  /** Scale factor: 1 for the full run, smaller for a quick run (BENCH_SCALE). */
  scale: number
  log(line: string): void
}

export type Bench = (ctx: BenchContext) => Promise<BenchFigure[]>

/** Runs `op` repeatedly for about `ms` milliseconds (after one warm-up call); returns ops/s. */
export async function throughput(op: () => Promise<unknown>, { ms = 2_000, batch = 1 } = {}): Promise<number> {
  await op()
  let count = 0
  const started = performance.now()
  while (performance.now() - started < ms) {
    await op()
    count += batch
  }
  return count / ((performance.now() - started) / 1000)
}

/**
 * Throughput of several operations measured in interleaved rounds (a, b, c, a, b, c, …) and
 * reported as the median round of each, so drift over the run (a growing table, a busy
 * neighbour) falls on every operation alike instead of on whichever ran last.
 */
export async function interleaved<K extends string>(
  ops: Record<K, () => Promise<unknown>>,
  { rounds = 7, msPerRound = 400 } = {},
): Promise<Record<K, number>> {
  const names = Object.keys(ops) as K[]
  const samples = new Map<K, number[]>(names.map((n) => [n, []]))
  for (let round = 0; round < rounds; round++) {
    for (const name of names) samples.get(name)!.push(await throughput(ops[name], { ms: msPerRound }))
  }
  const result = {} as Record<K, number>
  for (const name of names) {
    const sorted = [...samples.get(name)!].sort((a, b) => a - b)
    result[name] = sorted[Math.floor(sorted.length / 2)]!
  }
  return result
}

export function figure(f: Omit<BenchFigure, 'ratio'>): BenchFigure {
  return { ...f, ratio: f.baselineValue === 0 ? 0 : f.value / f.baselineValue }
}
