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

export function figure(f: Omit<BenchFigure, 'ratio'>): BenchFigure {
  return { ...f, ratio: f.baselineValue === 0 ? 0 : f.value / f.baselineValue }
}
