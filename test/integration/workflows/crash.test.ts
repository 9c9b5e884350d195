import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { execa } from 'execa'
import { afterEach, describe, expect, it } from 'vitest'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { createWorkflowRegistry, createWorkflowWorker, getRun, listSteps, startWorkflow, type WorkflowFunction } from '../../../src/workflows/index.js'
import { crashBetweenWorkflow } from './crash-between-workflow.js'
import { crashWorkflow } from './crash-workflow.js'
import { createEffectsTable, effects, recordEffect, silentLogger } from './harness.js'

const here = path.dirname(fileURLToPath(import.meta.url))

describe.each(DIALECTS)('orchestrator crashes on %s', (dialect) => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  it('resumes after kill -9 inside a step: the completed step is not run again', { timeout: 60_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    await createEffectsTable(db)
    const { run } = await startWorkflow(db, 'crashy', { label: 'x' }, { key: 'crash-1' })

    const child = execa('node', ['--import', 'tsx', path.join(here, 'crash-worker.ts')], {
      env: { DATABASE_URL: database.url },
      reject: false,
      cwd: path.resolve(here, '../../..'),
    })
    try {
      await waitFor(async () => (await effects(db, run.id)).includes('second'), 'the child to block inside step 2', 30_000)
      expect((await getRun(db, run.id))?.leaseOwner).toBe('doomed')
    } finally {
      child.kill('SIGKILL')
    }
    const exited = await child
    expect(exited.signal).toBe('SIGKILL')

    // The child's lease is 60 s: a clock two minutes ahead sees it expired and takes the run over.
    const later = () => new Date(Date.now() + 120_000)
    const registry = createWorkflowRegistry().register(
      'crashy',
      crashWorkflow(db, {
        async second(runId) {
          await recordEffect(db, runId, 'second')
          return 'x-2'
        },
      }),
    )
    const worker = createWorkflowWorker({ db, registry, logger: silentLogger, owner: 'survivor', leaseMs: 60_000, now: later })
    expect(await worker.tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect(await getRun(db, run.id)).toMatchObject({ status: 'completed', result: ['x-1', 'x-2', 'x-3'] })
    expect(await effects(db, run.id)).toEqual(['first', 'second', 'second', 'third'])
    expect((await listSteps(db, run.id)).map((s) => [s.stepKey, s.attempt])).toEqual([
      ['first#0', 1],
      ['second#0', 2],
      ['third#0', 1],
    ])
  })

  it('resumes after kill -9 between steps: step 1 is not run again and step 2 runs once', { timeout: 60_000 }, async () => {
    database = await createTestDatabase(dialect)
    const db = database.db
    await createEffectsTable(db)
    const { run } = await startWorkflow(db, 'crashy-between', { label: 'y' }, { key: 'crash-between-1' })

    const child = execa('node', ['--import', 'tsx', path.join(here, 'crash-between-worker.ts')], {
      env: { DATABASE_URL: database.url },
      reject: false,
      cwd: path.resolve(here, '../../..'),
    })
    let output = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
    })
    try {
      await waitFor(async () => output.includes('between'), 'the child to stop between step 1 and step 2', 30_000)
      // Step 1 is journaled as completed; step 2 has not started: no row, no effect.
      expect((await listSteps(db, run.id)).map((s) => [s.stepKey, s.status, s.attempt])).toEqual([['first#0', 'completed', 1]])
      expect(await effects(db, run.id)).toEqual(['first'])
      expect(await getRun(db, run.id)).toMatchObject({ status: 'running', leaseOwner: 'doomed' })
    } finally {
      child.kill('SIGKILL')
    }
    const exited = await child
    expect(exited.signal).toBe('SIGKILL')

    // The child's lease is 60 s: a clock two minutes ahead sees it expired and takes the run over.
    const later = () => new Date(Date.now() + 120_000)
    const registry = createWorkflowRegistry().register('crashy-between', crashBetweenWorkflow(db, async () => undefined))
    const worker = createWorkflowWorker({ db, registry, logger: silentLogger, owner: 'survivor', leaseMs: 60_000, now: later })
    expect(await worker.tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect(await getRun(db, run.id)).toMatchObject({ status: 'completed', result: ['y-1', 'y-2'] })
    expect(await effects(db, run.id)).toEqual(['first', 'second'])
    expect((await listSteps(db, run.id)).map((s) => [s.stepKey, s.status, s.attempt])).toEqual([
      ['first#0', 'completed', 1],
      ['second#0', 'completed', 1],
    ])
  })
})

describe('two orchestrators on one Postgres', () => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  it('share the runs without ever running two steps of one run at once', { timeout: 60_000 }, async () => {
    database = await createTestDatabase('postgres')
    const db = database.db
    await createEffectsTable(db)
    const executing = new Set<string>()
    const overlaps: string[] = []
    const ranBy = new Map<string, Set<string>>()
    const makeWorkflow = (owner: string): WorkflowFunction<{ i: number }, number> => async (ctx, input) => {
      let total = 0
      for (let s = 0; s < 3; s++) {
        total += await ctx.step('part', async () => {
          if (executing.has(ctx.runId)) overlaps.push(ctx.runId)
          executing.add(ctx.runId)
          ;(ranBy.get(ctx.runId) ?? ranBy.set(ctx.runId, new Set()).get(ctx.runId))?.add(owner)
          await recordEffect(db, ctx.runId, `part-${s}`)
          await new Promise((r) => setTimeout(r, Math.random() * 5))
          executing.delete(ctx.runId)
          return input.i + s
        })
      }
      return total
    }
    const runs = await Promise.all(Array.from({ length: 30 }, (_, i) => startWorkflow(db, 'shared', { i }, { key: `r${i}` })))
    const workers = ['a', 'b'].map((owner) =>
      createWorkflowWorker({ db: database!.connect(), registry: createWorkflowRegistry().register('shared', makeWorkflow(owner)), logger: silentLogger, owner, concurrency: 4 }),
    )
    const outcomes: string[] = []
    await Promise.all(
      workers.map(async (w) => {
        for (;;) {
          const done = await w.tick()
          outcomes.push(...done.map((d) => d.outcome))
          if (done.length === 0) break
        }
      }),
    )
    expect(overlaps).toEqual([])
    expect(outcomes.filter((o) => o === 'completed')).toHaveLength(30)
    for (const { run } of runs) {
      expect(await effects(db, run.id)).toEqual(['part-0', 'part-1', 'part-2'])
      expect((await getRun(db, run.id))?.status).toBe('completed')
    }
    // Both orchestrators did some of the work.
    const owners = new Set([...ranBy.values()].flatMap((s) => [...s]))
    expect(owners).toEqual(new Set(['a', 'b']))
  })
})
