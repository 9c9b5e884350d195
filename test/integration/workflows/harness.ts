/** Shared pieces of the workflow engine tests: a movable clock, a silent logger, a side-effect table. */
import { pino } from 'pino'
import type { Knex } from 'knex'

export const silentLogger = pino({ level: 'silent' })

export interface TestClock {
  now: () => Date
  advance(ms: number): void
  set(date: Date): void
}

export function testClock(start = Date.parse('2030-01-01T00:00:00Z')): TestClock {
  let t = start
  return {
    now: () => new Date(t),
    advance(ms) {
      t += ms
    },
    set(date) {
      t = date.getTime()
    },
  }
}

/** Side effects of test steps are rows here, so a test can count how often a step really ran. */
export async function createEffectsTable(db: Knex): Promise<void> {
  await db.schema.createTable('wf_test_effects', (t) => {
    t.increments('id')
    t.string('run_id', 64).notNullable()
    t.string('step', 100).notNullable()
  })
}

export async function recordEffect(db: Knex, runId: string, step: string): Promise<void> {
  await db('wf_test_effects').insert({ run_id: runId, step })
}

export async function effects(db: Knex, runId?: string): Promise<string[]> {
  const q = db('wf_test_effects').orderBy('id')
  if (runId) q.where({ run_id: runId })
  return ((await q) as Array<{ step: string }>).map((r) => r.step)
}
