import { afterEach, describe, expect, it } from 'vitest'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import {
  createWorkflowRegistry,
  createWorkflowWorker,
  getRun,
  listSteps,
  NonRetryableStepError,
  sendSignal,
  startWorkflow,
  StepFailedError,
  type WorkflowFunction,
  type WorkflowWorkerOptions,
} from '../../../src/workflows/index.js'
import { claimRuns, oldestUnconsumedSignal, writeUnderLease } from '../../../src/workflows/store.js'
import { createEffectsTable, effects, recordEffect, silentLogger, testClock, type TestClock } from './harness.js'

describe.each(DIALECTS)('workflow engine on %s', (dialect) => {
  let database: TestDatabase | undefined
  let clock: TestClock
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  async function setup() {
    database = await createTestDatabase(dialect)
    clock = testClock()
    await createEffectsTable(database.db)
    return database.db
  }

  function worker(workflows: Record<string, WorkflowFunction<never, unknown>>, extra: Partial<WorkflowWorkerOptions> = {}) {
    const registry = createWorkflowRegistry()
    for (const [name, fn] of Object.entries(workflows)) registry.register(name, fn as WorkflowFunction)
    return createWorkflowWorker({ db: database!.db, registry, logger: silentLogger, owner: 'w1', leaseMs: 30_000, now: () => clock.now(), ...extra })
  }

  it('lists steps in the order they ran, also when they started within the same millisecond', async () => {
    const db = await setup()
    // The test clock stands still: every step starts at the same instant.
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('zeta', async () => 1)
      await ctx.step('create-host', async () => 2)
      await ctx.step('alpha', async () => 3)
      return 'done'
    }
    const { run } = await startWorkflow(db, 'ordered', {}, { key: 'k', now: clock.now() })
    expect(await worker({ ordered: wf }).tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect((await listSteps(db, run.id)).map((s) => s.stepKey)).toEqual(['zeta#0', 'create-host#0', 'alpha#0'])
  })

  it('starts idempotently: the same key returns the same run, and concurrent starts make one run', async () => {
    const db = await setup()
    const first = await startWorkflow(db, 'provision', { node: 'a' }, { key: 'node-a', now: clock.now() })
    const again = await startWorkflow(db, 'provision', { node: 'changed' }, { key: 'node-a', now: clock.now() })
    expect(first.created).toBe(true)
    expect(again).toMatchObject({ created: false, run: { id: first.run.id, input: { node: 'a' }, status: 'pending' } })

    // SQLite: one pool (better-sqlite3 is synchronous, so two in-process writers would block each
    // other); the check-then-insert of each start still interleaves and races on the unique index.
    const pools = dialect === 'postgres' ? [db, database!.connect(), database!.connect(), database!.connect()] : [db, db, db, db]
    const raced = await Promise.all(pools.map((p) => startWorkflow(p, 'provision', { node: 'b' }, { key: 'node-b' })))
    expect(new Set(raced.map((r) => r.run.id)).size).toBe(1)
    expect(raced.filter((r) => r.created)).toHaveLength(1)
    const counted = (await db('workflow_runs').where({ workflow_key: 'node-b' }).count({ n: '*' })) as Array<{ n: number | string }>
    expect(Number(counted[0]?.n)).toBe(1)
  })

  it('journals steps: a worker that loses its run mid-step is taken over, completed steps are not redone, and the late result is discarded', async () => {
    const db = await setup()
    let release: (() => void) | undefined
    let secondCalls = 0
    const wf: WorkflowFunction<{ n: number }, number> = async (ctx, input) => {
      const a = await ctx.step('a', async () => {
        await recordEffect(db, ctx.runId, 'a')
        return input.n + 1
      })
      const b = await ctx.step('b', async () => {
        secondCalls += 1
        await recordEffect(db, ctx.runId, 'b')
        if (secondCalls === 1) await new Promise<void>((r) => (release = r))
        return a * 10 + secondCalls
      })
      return b
    }
    const { run } = await startWorkflow(db, 'journaled', { n: 1 }, { key: 'k', now: clock.now() })
    const w1 = worker({ journaled: wf }, { owner: 'w1' })
    const firstTick = w1.tick()
    await waitFor(async () => release !== undefined, 'step b to start on w1')
    expect((await getRun(db, run.id))?.currentStep).toBe('b#0')

    // w1 "hangs": its lease runs out and w2, on another pool, takes the run over.
    clock.advance(31_000)
    const w2 = createWorkflowWorker({ db: database!.connect(), registry: createWorkflowRegistry().register('journaled', wf), logger: silentLogger, owner: 'w2', leaseMs: 30_000, now: () => clock.now() })
    expect(await w2.tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    release?.()
    expect(await firstTick).toEqual([{ runId: run.id, outcome: 'lease-lost' }])

    const done = await getRun(db, run.id)
    expect(done).toMatchObject({ status: 'completed', result: 22, leaseOwner: null })
    expect(await effects(db, run.id)).toEqual(['a', 'b', 'b'])
    const steps = await listSteps(db, run.id)
    expect(steps.map((s) => [s.stepKey, s.status, s.attempt, s.result])).toEqual([
      ['a#0', 'completed', 1, 2],
      ['b#0', 'completed', 2, 22],
    ])
    expect(steps[1]?.error).toMatch(/interrupted/)
  })

  it('counts an attempt cut short by a dead or stalled worker, so retry exhaustion holds across crashes', async () => {
    const db = await setup()
    const releases: Array<() => void> = []
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('before', () => recordEffect(db, ctx.runId, 'before'))
      return ctx.step('stuck', async ({ attempt }) => {
        await recordEffect(db, ctx.runId, `stuck-${attempt}`)
        await new Promise<void>((r) => releases.push(r))
        return `finished ${attempt}`
      }, { retry: { maxAttempts: 2, initialIntervalMs: 0 } })
    }
    const { run } = await startWorkflow(db, 'stuck', {}, { key: 'k', now: clock.now() })
    // Two workers in turn start the step and never come back from it (killed, or hung past
    // their lease); each time the lease runs out and the next worker, on its own pool, takes over.
    const ticks: Array<Promise<unknown>> = []
    for (const [i, owner] of ['w1', 'w2'].entries()) {
      const w = createWorkflowWorker({ db: database!.connect(), registry: createWorkflowRegistry().register('stuck', wf), logger: silentLogger, owner, leaseMs: 30_000, now: () => clock.now() })
      ticks.push(w.tick())
      await waitFor(async () => releases.length === i + 1, `attempt ${i + 1} to start on ${owner}`)
      expect((await listSteps(db, run.id)).find((s) => s.stepKey === 'stuck#0')).toMatchObject({ status: 'running', attempt: i + 1 })
      clock.advance(31_000)
    }
    // The third worker finds the second attempt interrupted too: both count, none are left.
    expect(await worker({ stuck: wf }, { owner: 'w3' }).tick()).toEqual([{ runId: run.id, outcome: 'failed' }])
    for (const release of releases) release()
    expect(await Promise.all(ticks)).toEqual([[{ runId: run.id, outcome: 'lease-lost' }], [{ runId: run.id, outcome: 'lease-lost' }]])
    expect(await effects(db, run.id)).toEqual(['before', 'stuck-1', 'stuck-2'])
    const steps = await listSteps(db, run.id)
    expect(steps.map((s) => [s.stepKey, s.status, s.attempt])).toEqual([
      ['before#0', 'completed', 1],
      ['stuck#0', 'failed', 2],
    ])
    expect(steps[1]?.error).toMatch(/interrupted/)
    expect((await getRun(db, run.id))?.error).toMatch(/^step stuck#0 failed after 2 attempt\(s\): attempt interrupted/)
  })

  it('retries a failing step with backoff on the injected clock and fails the run when attempts run out', async () => {
    const db = await setup()
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('flaky', async ({ attempt }) => {
        await recordEffect(db, ctx.runId, `flaky-${attempt}`)
        throw new Error(`boom ${attempt}`)
      }, { retry: { maxAttempts: 3, initialIntervalMs: 1_000, backoffCoefficient: 2 } })
      return 'unreachable'
    }
    const { run } = await startWorkflow(db, 'flaky', {}, { key: 'k', now: clock.now() })
    const w = worker({ flaky: wf })
    const t0 = clock.now().getTime()
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    expect(await getRun(db, run.id)).toMatchObject({ status: 'sleeping', wakeAt: new Date(t0 + 1_000) })
    clock.advance(999)
    expect(await w.tick()).toEqual([])
    clock.advance(1)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    expect((await getRun(db, run.id))?.wakeAt).toEqual(new Date(t0 + 1_000 + 2_000))
    clock.advance(1_999)
    expect(await w.tick()).toEqual([])
    clock.advance(1)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'failed' }])
    expect(await effects(db, run.id)).toEqual(['flaky-1', 'flaky-2', 'flaky-3'])
    const failed = await getRun(db, run.id)
    expect(failed).toMatchObject({ status: 'failed', currentStep: 'flaky#0' })
    expect(failed?.error).toBe('step flaky#0 failed after 3 attempt(s): boom 3')
    expect((await listSteps(db, run.id))[0]).toMatchObject({ status: 'failed', attempt: 3, error: 'boom 3' })
    clock.advance(3_600_000)
    expect(await w.tick()).toEqual([])
  })

  it('fails a step at once, with its retries left, when an attempt throws NonRetryableStepError', async () => {
    const db = await setup()
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('deadline', async ({ attempt }) => {
        await recordEffect(db, ctx.runId, `deadline-${attempt}`)
        if (attempt === 1) throw new Error('transient')
        throw new NonRetryableStepError('the deadline has passed')
      }, { retry: { maxAttempts: 20, initialIntervalMs: 1_000 } })
      return 'unreachable'
    }
    const { run } = await startWorkflow(db, 'deadline', {}, { key: 'k', now: clock.now() })
    const w = worker({ deadline: wf })
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    clock.advance(1_000)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'failed' }])
    expect(await effects(db, run.id)).toEqual(['deadline-1', 'deadline-2'])
    expect((await listSteps(db, run.id))[0]).toMatchObject({ status: 'failed', attempt: 2, error: 'the deadline has passed' })
    expect((await getRun(db, run.id))?.error).toBe('step deadline#0 failed after 2 attempt(s): the deadline has passed')
  })

  it('fails an attempt that passes its timeout (its late result is discarded) and one that stops heartbeating', async () => {
    const db = await setup()
    const wf: WorkflowFunction<unknown, unknown> = async (ctx) => {
      const slow = await ctx.step('slow', async ({ attempt }) => {
        if (attempt === 1) await new Promise((r) => setTimeout(r, 300))
        return `attempt ${attempt}`
      }, { timeoutMs: 100, retry: { initialIntervalMs: 0 } })
      const beating = await ctx.step('beating', async (step) => {
        for (let i = 0; i < 6; i++) {
          await new Promise((r) => setTimeout(r, 25))
          step.heartbeat()
        }
        return 'alive'
      }, { preset: 'upgrade', heartbeatTimeoutMs: 80 })
      const silent = await ctx.step('silent', async () => new Promise((r) => setTimeout(() => r('too late'), 400)), {
        preset: 'upgrade',
        heartbeatTimeoutMs: 80,
        retry: { maxAttempts: 1 },
      }).catch((err: unknown) => (err instanceof StepFailedError ? err.lastError : 'other'))
      return { slow, beating, silent }
    }
    const { run } = await startWorkflow(db, 'timeouts', {}, { key: 'k', now: clock.now() })
    expect(await worker({ timeouts: wf }).tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect((await getRun(db, run.id))?.result).toEqual({ slow: 'attempt 2', beating: 'alive', silent: 'no heartbeat for 80 ms' })
    const steps = await listSteps(db, run.id)
    expect(steps.find((s) => s.stepKey === 'slow#0')).toMatchObject({ status: 'completed', attempt: 2, error: 'timed out after 100 ms' })
    expect(steps.find((s) => s.stepKey === 'beating#0')?.heartbeatAt).toBeInstanceOf(Date)
    await new Promise((r) => setTimeout(r, 350))
    expect(steps.find((s) => s.stepKey === 'slow#0')?.result).toBe('attempt 2')
    expect((await listSteps(db, run.id)).find((s) => s.stepKey === 'silent#0')).toMatchObject({ status: 'failed', attempt: 1 })
  })

  it('sleeps durably: nothing runs before the timer, the rest runs after the clock passes it', async () => {
    const db = await setup()
    const wakeAt = new Date(clock.now().getTime() + 3_600_000)
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('before', () => recordEffect(db, ctx.runId, 'before'))
      await ctx.sleepUntil(wakeAt)
      await ctx.step('after', () => recordEffect(db, ctx.runId, 'after'))
      await ctx.sleep(60_000)
      return 'done'
    }
    const { run } = await startWorkflow(db, 'sleepy', {}, { key: 'k', now: clock.now() })
    const w = worker({ sleepy: wf })
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    expect(await getRun(db, run.id)).toMatchObject({ status: 'sleeping', wakeAt, leaseOwner: null })
    clock.advance(3_599_999)
    expect(await w.tick()).toEqual([])
    expect(await effects(db, run.id)).toEqual(['before'])
    clock.advance(1)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    expect(await effects(db, run.id)).toEqual(['before', 'after'])
    clock.advance(60_000)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect(await effects(db, run.id)).toEqual(['before', 'after'])
  })

  it('waits for signals: a timeout gives undefined, a signal sent before or during the wait gives its payload, each consumed once in order', async () => {
    const db = await setup()
    const wf: WorkflowFunction<unknown, unknown[]> = async (ctx) => {
      const got: unknown[] = []
      got.push(await ctx.waitForSignal('approve', { timeoutMs: 60_000 }))
      got.push(await ctx.waitForSignal('approve', { timeoutMs: 60_000 }))
      got.push(await ctx.waitForSignal('approve', { timeoutMs: 60_000 }))
      return got
    }
    const w = worker({ approvals: wf })
    const { run } = await startWorkflow(db, 'approvals', {}, { key: 'k', now: clock.now() })
    // Before the wait starts.
    await sendSignal(db, { name: 'approvals', key: 'k' }, 'approve', { by: 'early' }, { now: clock.now() })
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    // During the wait: the run wakes at once, whatever the clock says.
    await sendSignal(db, run.id, 'approve', { by: 'during' }, { now: clock.now() })
    expect((await getRun(db, run.id))?.status).toBe('pending')
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'sleeping' }])
    // The third wait times out.
    clock.advance(59_999)
    expect(await w.tick()).toEqual([])
    clock.advance(1)
    expect(await w.tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect((await getRun(db, run.id))?.result).toEqual([{ by: 'early' }, { by: 'during' }, null])
    const signals = (await db('workflow_signals').where({ run_id: run.id })) as Array<{ consumed_at: unknown }>
    expect(signals).toHaveLength(2)
    expect(signals.every((s) => s.consumed_at !== null)).toBe(true)
    await expect(sendSignal(db, 'no-such-run', 'approve')).rejects.toThrow(/no workflow run/)
  })

  it('loses no signal sent while the run is going to sleep: it waits for the sleep to commit, then wakes the run', async () => {
    const db = await setup()
    const { run } = await startWorkflow(db, 'approvals', {}, { key: 'race', now: clock.now() })
    const [claimed] = await claimRuns(db, { owner: 'w1', names: ['approvals'], limit: 1, leaseMs: 30_000, now: clock.now() })
    const lease = { runId: run.id, owner: 'w1', version: claimed!.version }
    // What a worker does when its wait finds no signal: mark the run sleeping and look once more
    // for a signal, in one transaction. The signal is sent after that look, before the commit.
    let sent: Promise<unknown> | undefined
    let sentBeforeCommit = false
    await writeUnderLease(db, lease, clock.now(), { status: 'sleeping', wake_at: null, lease_owner: null, lease_expires_at: null }, async (trx) => {
      expect(await oldestUnconsumedSignal(trx, run.id, 'approve')).toBeNull()
      const other = dialect === 'postgres' ? database!.connect() : db
      sent = sendSignal(other, run.id, 'approve', { by: 'racing' }, { now: clock.now() }).then(() => (sentBeforeCommit = true))
      await new Promise((resolve) => setTimeout(resolve, 300))
    })
    expect(sentBeforeCommit).toBe(false)
    await sent
    expect((await getRun(db, run.id))?.status).toBe('pending')
  })

  it('compensates completed steps in reverse order when a later step fails', async () => {
    const db = await setup()
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      const saga = ctx.saga()
      for (const name of ['host', 'dns', 'config']) {
        await ctx.step(`create-${name}`, () => recordEffect(db, ctx.runId, `create ${name}`))
        saga.add(name, () => recordEffect(db, ctx.runId, `undo ${name}`))
      }
      try {
        await ctx.step('start', async () => {
          throw new Error('node does not start')
        }, { retry: { maxAttempts: 1 } })
        return 'started'
      } catch (err) {
        await saga.compensate()
        return `compensated: ${(err as Error).message}`
      }
    }
    const { run } = await startWorkflow(db, 'saga', {}, { key: 'k', now: clock.now() })
    expect(await worker({ saga: wf }).tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect((await getRun(db, run.id))?.result).toBe('compensated: step start#0 failed after 1 attempt(s): node does not start')
    expect(await effects(db, run.id)).toEqual(['create host', 'create dns', 'create config', 'undo config', 'undo dns', 'undo host'])
    expect((await listSteps(db, run.id)).map((s) => s.stepKey)).toEqual(
      expect.arrayContaining(['compensate:config#0', 'compensate:dns#0', 'compensate:host#0']),
    )
  })

  it('a stopping worker finishes the step in flight and hands the run back', async () => {
    const db = await setup()
    let release: (() => void) | undefined
    const wf: WorkflowFunction<unknown, string> = async (ctx) => {
      await ctx.step('one', async () => {
        await recordEffect(db, ctx.runId, 'one')
        await new Promise<void>((r) => (release = r))
      })
      await ctx.step('two', () => recordEffect(db, ctx.runId, 'two'))
      return 'done'
    }
    const { run } = await startWorkflow(db, 'drain', {}, { key: 'k', now: clock.now() })
    const w = worker({ drain: wf })
    const ticked = w.tick()
    await waitFor(async () => release !== undefined, 'step one to start')
    const stopped = w.stop()
    release?.()
    await stopped
    expect(await ticked).toEqual([{ runId: run.id, outcome: 'released' }])
    expect(await getRun(db, run.id)).toMatchObject({ status: 'running', leaseOwner: null })
    expect(await effects(db, run.id)).toEqual(['one'])
    expect(await worker({ drain: wf }, { owner: 'w2' }).tick()).toEqual([{ runId: run.id, outcome: 'completed' }])
    expect(await effects(db, run.id)).toEqual(['one', 'two'])
  })
})
