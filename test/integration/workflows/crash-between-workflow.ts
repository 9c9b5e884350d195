/**
 * The workflow of the kill -9 "between steps" test: two steps that each record a side effect,
 * with a hook in the workflow body between them. The child process's hook reports that step 1
 * is journaled and blocks forever (so it is killed after step 1 committed and before step 2
 * started); the resuming worker's hook does nothing.
 */
import type { Knex } from 'knex'
import type { WorkflowFunction } from '../../../src/workflows/index.js'
import { recordEffect } from './harness.js'

export function crashBetweenWorkflow(db: Knex, between: (runId: string) => Promise<void>): WorkflowFunction<{ label: string }, string[]> {
  return async (ctx, input) => {
    const first = await ctx.step('first', async () => {
      await recordEffect(db, ctx.runId, 'first')
      return `${input.label}-1`
    })
    await between(ctx.runId)
    const second = await ctx.step('second', async () => {
      await recordEffect(db, ctx.runId, 'second')
      return `${input.label}-2`
    })
    return [first, second]
  }
}
