/**
 * Starts the longest test files first, so the run does not end with one long file alone on a
 * core. A clean clone has no vitest cache of earlier durations, and vitest then orders by file
 * size, which put the rollout-commands e2e halves (small files over a shared suite) last: a
 * two-minute tail at half the CPU idle. The durations are test/durations.json, the wall seconds
 * of a full run (refresh it from `NODEPLANE_TEST_TIMES_FILE`: docs/development.md); a file it does
 * not know yet counts as 30 s.
 */
import fs from 'node:fs'
import path from 'node:path'
import { BaseSequencer, type TestSpecification } from 'vitest/node'

const UNKNOWN_SECONDS = 30

function knownDurations(root: string): Map<string, number> {
  try {
    const table = JSON.parse(fs.readFileSync(path.join(root, 'test/durations.json'), 'utf8')) as Record<string, number>
    return new Map(Object.entries(table))
  } catch {
    return new Map()
  }
}

export default class DurationSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root
    const durations = knownDurations(root)
    const seconds = (spec: TestSpecification) => durations.get(path.relative(root, spec.moduleId)) ?? UNKNOWN_SECONDS
    return [...files].sort((a, b) => seconds(b) - seconds(a))
  }
}
