/**
 * Prints the ten slowest test files at the end of a run (wall time from the file's start to its
 * end, set-up included), so the next slow test is visible in every CI log.
 */
import path from 'node:path'
import type { Reporter, TestModule } from 'vitest/node'

export default class SlowestFilesReporter implements Reporter {
  readonly #started = new Map<string, number>()
  readonly #durations = new Map<string, number>()

  onTestModuleStart(testModule: TestModule): void {
    this.#started.set(testModule.moduleId, performance.now())
  }

  onTestModuleEnd(testModule: TestModule): void {
    const started = this.#started.get(testModule.moduleId)
    if (started !== undefined) this.#durations.set(testModule.moduleId, performance.now() - started)
  }

  onTestRunEnd(): void {
    const slowest = [...this.#durations].sort((a, b) => b[1] - a[1]).slice(0, 10)
    if (slowest.length === 0) return
    const lines = slowest.map(([file, ms]) => `  ${(ms / 1000).toFixed(1).padStart(7)} s  ${path.relative(process.cwd(), file)}`)
    process.stdout.write(`\nSlowest test files:\n${lines.join('\n')}\n`)
  }
}
