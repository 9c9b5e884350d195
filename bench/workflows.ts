/**
 * Workflow step throughput: journaled steps/s through the durable workflow engine (SQLite,
 * Postgres). One operation starts a run of a workflow with STEPS trivial steps and drives it to
 * completion with a worker's tick(); steps/s = STEPS x runs/s, so the start, the claim and the
 * completion write are counted in. Each step costs a journal read and two lease-checked
 * transactions (step running, step completed). Baseline: the same number of single-row inserts,
 * each in its own transaction, into a scratch table on the same database, interleaved rounds.
 * Aim (issue 4, 2 cores): >= 1,000 steps/s on SQLite, >= 500 steps/s on Postgres.
 */
import { pino } from 'pino'
import { createWorkflowRegistry, createWorkflowWorker, startWorkflow, type WorkflowFunction } from '../src/workflows/index.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, interleaved, type Bench, type BenchFigure } from './lib.js'

const STEPS = 20
const AIM: Record<Dialect, string> = { sqlite: '>= 1000/s sqlite', postgres: '>= 500/s postgres' }

const steps: WorkflowFunction<{ n: number }, number> = async (ctx, input) => {
  let total = 0
  for (let i = 0; i < input.n; i++) total += await ctx.step('s', async () => i)
  return total
}

export const benchWorkflows: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
    const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
    try {
      await db.schema.createTable('bench_scratch', (t) => {
        t.increments('id')
        t.string('run_id', 64).notNullable()
        t.string('step_key', 100).notNullable()
        t.text('result')
      })
      const worker = createWorkflowWorker({
        db,
        registry: createWorkflowRegistry().register('bench-steps', steps),
        logger: pino({ level: 'silent' }),
        owner: 'bench',
        concurrency: 1,
      })
      let r = 0
      let b = 0
      const rates = await interleaved(
        {
          bare: async () => {
            const runId = `bare-${b++}`
            for (let i = 0; i < STEPS; i++) {
              await db.transaction(async (trx) => {
                await trx('bench_scratch').insert({ run_id: runId, step_key: `s#${i}`, result: String(i) })
              })
            }
          },
          workflow: async () => {
            await startWorkflow(db, 'bench-steps', { n: STEPS }, { key: `run-${r++}` })
            const done = await worker.tick()
            if (done.length !== 1 || done[0]!.outcome !== 'completed') throw new Error(`workflow run did not complete: ${JSON.stringify(done)}`)
          },
        },
        { msPerRound: 400 * ctx.scale },
      )
      const stepsPerSecond = rates.workflow * STEPS
      const insertsPerSecond = rates.bare * STEPS
      ctx.log(`workflows ${dialect}: ${stepsPerSecond.toFixed(0)} steps/s (${rates.workflow.toFixed(1)} runs of ${STEPS} steps/s) vs bare insert ${insertsPerSecond.toFixed(0)}/s`)
      figures.push(
        figure({
          name: `journaled workflow steps, ${STEPS}-step runs started and driven to completion by a worker (${dialect})`,
          baseline: `bare single-row insert in its own transaction (${dialect})`,
          unit: 'steps/s',
          value: stepsPerSecond,
          baselineValue: insertsPerSecond,
          aim: AIM[dialect],
          notes: `${stepsPerSecond.toFixed(0)} steps/s absolute (${rates.workflow.toFixed(1)} runs/s) against ${insertsPerSecond.toFixed(0)} inserts/s; each step is a journal read plus two transactions`,
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}
