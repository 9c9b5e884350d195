/**
 * Prints the ten slowest test files at the end of a run (wall time from the file's start to its
 * end, set-up included, and the CPU seconds its worker and children used), so the next slow test
 * is visible in every CI log, and whether it is slow from waiting or from work.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Reporter, TestModule } from 'vitest/node'

export default class SlowestFilesReporter implements Reporter {
  readonly #started = new Map<string, number>()
  readonly #durations = new Map<string, number>()
  #cpuDir: string | undefined

  onInit(): void {
    // Set before the workers start, which inherit it (test/helpers/file-setup.ts).
    this.#cpuDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-test-cpu-'))
    process.env.NODEPLANE_TEST_CPU_LOG = path.join(this.#cpuDir, 'cpu.jsonl')
  }

  onTestModuleStart(testModule: TestModule): void {
    this.#started.set(testModule.moduleId, performance.now())
  }

  onTestModuleEnd(testModule: TestModule): void {
    const started = this.#started.get(testModule.moduleId)
    if (started !== undefined) this.#durations.set(testModule.moduleId, performance.now() - started)
  }

  onTestRunEnd(): void {
    const cpu = this.#readCpu()
    const slowest = [...this.#durations].sort((a, b) => b[1] - a[1]).slice(0, 10)
    if (slowest.length > 0) {
      const lines = slowest.map(([file, ms]) => {
        const seconds = cpu.get(file)
        const cpuColumn = seconds === undefined ? '' : `  (cpu ${seconds.toFixed(1)} s)`
        return `  ${(ms / 1000).toFixed(1).padStart(7)} s  ${path.relative(process.cwd(), file)}${cpuColumn}`
      })
      process.stdout.write(`\nSlowest test files:\n${lines.join('\n')}\n`)
    }
    const detail = process.env.NODEPLANE_TEST_TIMES_FILE
    if (detail) {
      const rows = [...this.#durations].map(([file, ms]) => ({
        file: path.relative(process.cwd(), file),
        wallSeconds: ms / 1000,
        cpuSeconds: cpu.get(file) ?? null,
      }))
      fs.writeFileSync(detail, `${JSON.stringify(rows, null, 1)}\n`)
    }
  }

  #readCpu(): Map<string, number> {
    const cpu = new Map<string, number>()
    if (!this.#cpuDir) return cpu
    const log = path.join(this.#cpuDir, 'cpu.jsonl')
    if (fs.existsSync(log)) {
      for (const line of fs.readFileSync(log, 'utf8').split('\n')) {
        if (!line) continue
        const row = JSON.parse(line) as { file: string; cpuSeconds: number }
        cpu.set(row.file, row.cpuSeconds)
      }
    }
    fs.rmSync(this.#cpuDir, { recursive: true, force: true })
    return cpu
  }
}
