/**
 * Runs before every test file (vitest's setupFiles).
 *
 * Removes the file's temporary directories at its end (test/helpers/temp-dirs.ts).
 *
 * Records the CPU a test file used (its worker process and every child it started and reaped:
 * daemons, agents, CLI runs) so the slowest-files report can tell a file that waits on timers
 * from one that keeps the cores busy. A forks-pool worker runs its files one after another, so a
 * file's figure is the worker's totals at its end minus those at its start (this setup file runs
 * before each test file); the threads pool's files share one process and get none. The log's
 * path comes from the reporter (test/helpers/slowest-files-reporter.ts).
 */
import fs from 'node:fs'
import { isMainThread } from 'node:worker_threads'
import { afterAll } from 'vitest'
import { removeTempDirs } from './temp-dirs.js'

const CLOCK_TICKS_PER_SECOND = 100

function processCpuSeconds(): number {
  // /proc/self/stat after the command name: utime, stime, cutime, cstime (waited-for children)
  // are fields 14-17.
  const stat = fs.readFileSync('/proc/self/stat', 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const ticks = [11, 12, 13, 14].reduce((sum, index) => sum + Number(fields[index]), 0)
  return ticks / CLOCK_TICKS_PER_SECOND
}

const atStart = isMainThread && process.env.NODEPLANE_TEST_CPU_LOG ? processCpuSeconds() : 0

afterAll((suite) => {
  const log = process.env.NODEPLANE_TEST_CPU_LOG
  // A file of the threads pool shares its process with vitest and the other threads: no figure of its own.
  if (!log || !isMainThread || !('filepath' in suite)) return
  fs.appendFileSync(log, `${JSON.stringify({ file: suite.filepath, cpuSeconds: processCpuSeconds() - atStart })}\n`)
})

// Registered before the file's own hooks, so it runs after them (afterAll hooks run as a stack).
afterAll(() => removeTempDirs())
