/**
 * Workflow step throughput: journaled steps/s through the durable workflow engine (SQLite,
 * Postgres). One operation starts a run of a workflow with STEPS trivial steps and drives it to
 * completion with a worker's tick(); steps/s = STEPS x runs/s, so the start, the claim, the
 * journal read and the completion write are counted in. Each step costs two lease-checked
 * commits: the "running" row (which counts the attempt across crashes) and the result; on
 * Postgres each is one prepared statement, on SQLite one synchronous transaction. After the
 * timed rounds the bench checks that the last run's journal really holds STEPS completed rows.
 * Baseline: the same number of single-row inserts, each in its own transaction, into a scratch
 * table on the same database, interleaved rounds.
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
      // What was measured is what the figure claims: every step journaled, completed, once.
      const last = (await db('workflow_runs').where({ workflow_key: `run-${r - 1}` }).first()) as { id: string; status: string }
      const journaled = (await db('workflow_steps').where({ run_id: last.id })) as Array<{ status: string; attempt: number }>
      if (last.status !== 'completed' || journaled.length !== STEPS || journaled.some((s) => s.status !== 'completed' || Number(s.attempt) !== 1)) {
        throw new Error(`the last benchmark run is not fully journaled: ${last.status}, ${JSON.stringify(journaled)}`)
      }
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
          notes: `${stepsPerSecond.toFixed(0)} steps/s absolute (${rates.workflow.toFixed(1)} runs/s) against ${insertsPerSecond.toFixed(0)} inserts/s; each step is two lease-checked commits (running, result), the journal is read once per run`,
        }),
      )
    } finally {
      await drop()
    }
  }
  return figures
}
