/**
 * The workflow of the kill -9 test, with its activities injected: the child process's second
 * step blocks forever (so it is killed inside it), the resuming worker's does not.
 */
import type { Knex } from 'knex'
import type { WorkflowFunction } from '../../../src/workflows/index.js'
import { recordEffect } from './harness.js'

export interface CrashActivities {
  second(runId: string): Promise<string>
}

export function crashWorkflow(db: Knex, activities: CrashActivities): WorkflowFunction<{ label: string }, string[]> {
  return async (ctx, input) => {
    const first = await ctx.step('first', async () => {
      await recordEffect(db, ctx.runId, 'first')
      return `${input.label}-1`
    })
    const second = await ctx.step('second', () => activities.second(ctx.runId))
    const third = await ctx.step('third', async () => {
      await recordEffect(db, ctx.runId, 'third')
      return `${input.label}-3`
    })
    return [first, second, third]
  }
}
