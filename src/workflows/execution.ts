/**
 * One execution of one claimed run: the workflow function is replayed from the start, each
 * step answering from the journal until the first one that has not completed, which runs
 * for real. The execution ends when the function returns or throws (the run completes or
 * fails), or is interrupted: a timer, signal wait or retry backoff puts the run to sleep and
 * releases the lease; a lost lease or a stopping worker abandons it.
 */
import type { Knex } from 'knex'
import type { Logger } from '../log.js'
import { errorMessage, LeaseLostError, NonRetryableStepError, StepFailedError, StepTimeoutError, WorkflowInterrupt } from './errors.js'
import { resolveStepPolicy, retryDelayMs, type StepOptions, type StepPolicy } from './policy.js'
import {
  consumeSignal,
  getTimer,
  insertTimer,
  journal,
  journalStep,
  loadJournal,
  markTimerFired,
  oldestUnconsumedSignal,
  recordHeartbeat,
  renewLease,
  upsertStep,
  writeUnderLease,
  type Lease,
  type StepRecord,
  type WorkflowRun,
} from './store.js'
import type { Saga, StepContext, WorkflowContext, WorkflowFunction } from './types.js'

export type ExecutionOutcome = 'completed' | 'failed' | 'sleeping' | 'released' | 'lease-lost'

type Interrupt = { kind: 'sleep'; wakeAt: Date | null; signal?: string } | { kind: 'stop' } | { kind: 'lease-lost' }

type AttemptResult = { ok: true; value: unknown } | { ok: false; error: string; final?: boolean }

export interface ExecutionOptions {
  db: Knex
  run: WorkflowRun
  lease: Lease
  workflow: WorkflowFunction
  now: () => Date
  logger: Logger
  leaseMs: number
  /** True once the worker is stopping: no new step starts. */
  stopping: () => boolean
}

const INTERRUPTED_ATTEMPT = 'attempt interrupted: the orchestrator running it stopped or lost its lease'

export class RunExecution {
  private interrupt: Interrupt | null = null
  private readonly occurrences = new Map<string, number>()
  private currentHeartbeat: (() => void) | null = null
  /** The run's step rows, read once at the start and kept current by this execution's writes. */
  private journaled = new Map<string, StepRecord>()
  /** Serialises this run's database writes and lease renewals (both check the version). */
  private queue: Promise<unknown> = Promise.resolve()

  constructor(private readonly o: ExecutionOptions) {}

  get runId(): string {
    return this.o.run.id
  }

  /** Called periodically by the worker while the execution runs. */
  async renew(): Promise<void> {
    if (this.interrupt?.kind === 'lease-lost') return
    const ok = await this.exclusive(() => renewLease(this.o.db, this.o.lease, this.o.leaseMs, this.o.now()))
    if (!ok) {
      this.o.logger.warn('lease lost; abandoning the run')
      this.interrupt = { kind: 'lease-lost' }
    }
  }

  async execute(): Promise<ExecutionOutcome> {
    let returned: { ok: true; value: unknown } | { ok: false; error: unknown }
    this.journaled = await loadJournal(this.o.db, this.o.run.id)
    try {
      returned = { ok: true, value: await this.o.workflow(this.context(), this.o.run.input) }
    } catch (err) {
      returned = { ok: false, error: err }
    }
    // The interrupt is checked first: a workflow that caught WorkflowInterrupt does not get to finish.
    const interrupt = this.interrupt as Interrupt | null
    try {
      if (interrupt?.kind === 'lease-lost') return 'lease-lost'
      if (interrupt?.kind === 'stop') {
        await this.write({ lease_owner: null, lease_expires_at: null })
        return 'released'
      }
      if (interrupt?.kind === 'sleep') return await this.sleep(interrupt)
      const now = this.o.now()
      if (returned.ok) {
        await this.write({ status: 'completed', result: journal(returned.value), error: null, completed_at: now, lease_owner: null, lease_expires_at: null, wake_at: null })
        return 'completed'
      }
      const error = errorMessage(returned.error)
      await this.write({ status: 'failed', error, completed_at: now, lease_owner: null, lease_expires_at: null, wake_at: null })
      this.o.logger.warn({ error }, 'workflow failed')
      return 'failed'
    } catch (err) {
      if (err instanceof WorkflowInterrupt && this.interrupt?.kind === 'lease-lost') return 'lease-lost'
      throw err
    }
  }

  private async sleep(interrupt: { wakeAt: Date | null; signal?: string }): Promise<ExecutionOutcome> {
    const { run } = this.o
    let woken = false
    await this.write({ status: 'sleeping', wake_at: interrupt.wakeAt, lease_owner: null, lease_expires_at: null }, async (trx) => {
      // A signal that arrived after the wait looked for it, but before this commit, would find
      // the run still running and not wake it: look again inside the same transaction.
      if (interrupt.signal && (await oldestUnconsumedSignal(trx, run.id, interrupt.signal))) {
        woken = true
        await trx('workflow_runs').where({ id: run.id }).update({ status: 'pending', wake_at: null })
      }
    })
    return woken ? 'released' : 'sleeping'
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn)
    this.queue = next.catch(() => undefined)
    return next
  }

  /** A lease-checked write; a lost lease interrupts the workflow for good. */
  private write(runChanges: Record<string, unknown>, more?: (trx: Knex.Transaction) => Promise<void>): Promise<void> {
    return this.guard(() => writeUnderLease(this.o.db, this.o.lease, this.o.now(), runChanges, more))
  }

  private async guard(write: () => Promise<void>): Promise<void> {
    try {
      await this.exclusive(write)
    } catch (err) {
      if (err instanceof LeaseLostError) {
        this.o.logger.warn('lease lost; abandoning the run')
        this.interrupt = { kind: 'lease-lost' }
        throw new WorkflowInterrupt('lease lost')
      }
      throw err
    }
  }

  /** Journals a step row under the lease (one statement on Postgres) and keeps the copy current. */
  private async record(key: string, step: StepRecord): Promise<void> {
    await this.guard(() => journalStep(this.o.db, this.o.lease, this.o.now(), key, step))
    this.journaled.set(key, step)
  }

  private checkInterrupted(): void {
    if (this.interrupt) throw new WorkflowInterrupt(this.interrupt.kind)
    if (this.o.stopping()) {
      this.interrupt = { kind: 'stop' }
      throw new WorkflowInterrupt('worker stopping')
    }
  }

  private suspend(wakeAt: Date | null, signal?: string): never {
    this.interrupt = { kind: 'sleep', wakeAt, ...(signal ? { signal } : {}) }
    throw new WorkflowInterrupt(wakeAt ? `sleeping until ${wakeAt.toISOString()}` : 'waiting for a signal')
  }

  private nextKey(name: string): string {
    const n = this.occurrences.get(name) ?? 0
    this.occurrences.set(name, n + 1)
    return `${name}#${n}`
  }

  private context(): WorkflowContext {
    const run = this.o.run
    const ctx: WorkflowContext = {
      runId: run.id,
      workflowName: run.workflowName,
      workflowKey: run.workflowKey,
      step: (name, fn, options) => this.step(name, fn, options),
      sleepUntil: (date) => this.timer(this.nextKey('~sleep'), () => date),
      sleep: (ms) => this.timer(this.nextKey('~sleep'), () => new Date(this.o.now().getTime() + ms)),
      waitForSignal: <T>(name: string, options: { timeoutMs?: number } = {}) => this.waitForSignal(name, options.timeoutMs) as Promise<T | undefined>,
      heartbeat: () => this.currentHeartbeat?.(),
      saga: () => createSaga(ctx),
      now: async () => new Date(await this.step('~now', async () => this.o.now().toISOString(), undefined, false)),
    }
    return ctx
  }

  /**
   * `journalStart: false` is for the engine's own pure steps (`~now`): nothing outside the
   * process happens while they run, so their attempt needs no "running" row before it.
   */
  private async step<T>(name: string, fn: (step: StepContext) => Promise<T>, options?: StepOptions, journalStart = true): Promise<T> {
    this.checkInterrupted()
    const key = this.nextKey(name)
    const policy = resolveStepPolicy(options)
    for (;;) {
      const existing = this.journaled.get(key)
      if (existing?.status === 'completed') return existing.result as T
      if (existing?.status === 'failed') throw new StepFailedError(key, existing.attempt, existing.error ?? 'failed')
      this.checkInterrupted()
      const previous = existing?.attempt ?? 0
      let lastError = existing?.error ?? null
      if (existing?.status === 'running') {
        // Found running on replay: the process running it died or lost its lease mid-attempt.
        lastError = INTERRUPTED_ATTEMPT
        if (previous >= policy.retry.maxAttempts) {
          await this.record(key, { ...existing, status: 'failed', error: lastError, finishedAt: this.o.now() })
          throw new StepFailedError(key, previous, lastError)
        }
      } else if (existing?.status === 'retrying' && existing.nextAttemptAt && existing.nextAttemptAt > this.o.now()) {
        this.suspend(existing.nextAttemptAt)
      }
      const attempt = previous + 1
      const startedAt = this.o.now()
      const started: StepRecord = {
        status: 'running',
        attempt,
        result: undefined,
        error: lastError,
        startedAt,
        timeoutAt: new Date(startedAt.getTime() + policy.timeoutMs),
        nextAttemptAt: null,
        finishedAt: null,
      }
      // The "running" row is what counts this attempt if the process dies during it (retry
      // exhaustion across crashes), and shows the step as current while it runs. It is committed
      // before `fn` starts; the result below is a second commit, and both check the lease.
      if (journalStart) await this.record(key, started)
      const outcome = await this.attempt(key, attempt, policy, fn)
      this.checkLease()
      const finishedAt = this.o.now()
      if (outcome.ok) {
        await this.record(key, { ...started, status: 'completed', result: outcome.value, finishedAt })
        return outcome.value as T
      }
      this.o.logger.warn({ step: key, attempt, error: outcome.error }, 'step attempt failed')
      if (attempt >= policy.retry.maxAttempts || outcome.final) {
        await this.record(key, { ...started, status: 'failed', error: outcome.error, finishedAt })
        throw new StepFailedError(key, attempt, outcome.error)
      }
      const nextAttemptAt = new Date(finishedAt.getTime() + retryDelayMs(policy.retry, attempt))
      await this.record(key, { ...started, status: 'retrying', error: outcome.error, finishedAt, nextAttemptAt })
      if (nextAttemptAt > this.o.now()) this.suspend(nextAttemptAt)
    }
  }

  private checkLease(): void {
    if (this.interrupt?.kind === 'lease-lost') throw new WorkflowInterrupt('lease lost')
  }

  /**
   * Runs one attempt against its timeouts. JavaScript cannot cancel a running function: a
   * timed-out attempt keeps running in the background and its late result is discarded.
   */
  private attempt(key: string, attempt: number, policy: StepPolicy, fn: (step: StepContext) => Promise<unknown>): Promise<AttemptResult> {
    return new Promise<AttemptResult>((resolve) => {
      let settled = false
      let heartbeatTimer: NodeJS.Timeout | undefined
      const finish = (result: AttemptResult) => {
        if (settled) return
        settled = true
        clearTimeout(timeout)
        clearTimeout(heartbeatTimer)
        this.currentHeartbeat = null
        resolve(result)
      }
      const timeout = setTimeout(() => finish({ ok: false, error: new StepTimeoutError(`timed out after ${policy.timeoutMs} ms`).message }), policy.timeoutMs)
      const armHeartbeat = () => {
        if (policy.heartbeatTimeoutMs === undefined) return
        clearTimeout(heartbeatTimer)
        heartbeatTimer = setTimeout(() => finish({ ok: false, error: `no heartbeat for ${policy.heartbeatTimeoutMs} ms` }), policy.heartbeatTimeoutMs)
      }
      const heartbeat = () => {
        if (settled) return
        armHeartbeat()
        recordHeartbeat(this.o.db, this.o.run.id, key, this.o.now()).catch((err: unknown) => this.o.logger.warn({ err, step: key }, 'could not record a heartbeat'))
      }
      armHeartbeat()
      this.currentHeartbeat = heartbeat
      let running: Promise<unknown>
      try {
        running = fn({ attempt, heartbeat })
      } catch (err) {
        running = Promise.reject(err)
      }
      running.then(
        (value) => finish({ ok: true, value }),
        (err: unknown) => finish({ ok: false, error: errorMessage(err), final: err instanceof NonRetryableStepError }),
      )
    })
  }

  private async timer(key: string, fireAtIfNew: () => Date): Promise<void> {
    this.checkInterrupted()
    const { db, run } = this.o
    let timer = await getTimer(db, run.id, key)
    if (!timer) {
      const fireAt = fireAtIfNew()
      await this.write({ current_step: key }, (trx) => insertTimer(trx, run.id, key, fireAt))
      timer = { fireAt, firedAt: null }
    }
    if (timer.firedAt) return
    if (timer.fireAt <= this.o.now()) {
      await this.write({ current_step: key }, (trx) => markTimerFired(trx, run.id, key, this.o.now()))
      return
    }
    this.suspend(timer.fireAt)
  }

  private async waitForSignal(name: string, timeoutMs: number | undefined): Promise<unknown> {
    this.checkInterrupted()
    const key = this.nextKey(`~signal:${name}`)
    const { db, run } = this.o
    let wait = this.journaled.get(key)
    if (wait?.status === 'completed') return (wait.result as { payload?: unknown }).payload
    if (!wait) {
      // The deadline is journaled on first reach, so a replay waits for the same instant.
      const startedAt = this.o.now()
      const timeoutAt = timeoutMs === undefined ? null : new Date(startedAt.getTime() + timeoutMs)
      wait = { status: 'waiting', attempt: 1, result: undefined, error: null, startedAt, timeoutAt, nextAttemptAt: null, finishedAt: null }
      await this.record(key, wait)
    }
    const signal = await oldestUnconsumedSignal(db, run.id, name)
    const now = this.o.now()
    if (signal) {
      const result = { payload: signal.payload }
      await this.write({ current_step: key }, async (trx) => {
        await consumeSignal(trx, signal.id, now)
        await upsertStep(trx, run.id, key, { status: 'completed', result, finished_at: now })
      })
      this.journaled.set(key, { ...wait, status: 'completed', result, finishedAt: now })
      return signal.payload
    }
    if (wait.timeoutAt && wait.timeoutAt <= now) {
      await this.record(key, { ...wait, status: 'completed', result: { timedOut: true }, finishedAt: now })
      return undefined
    }
    this.suspend(wait.timeoutAt, name)
  }
}

function createSaga(ctx: WorkflowContext): Saga {
  const undos: Array<{ name: string; undo: () => Promise<unknown>; options: StepOptions | undefined }> = []
  return {
    add(name, undo, options) {
      undos.push({ name, undo, options })
    },
    async compensate() {
      for (const { name, undo, options } of undos.splice(0).reverse()) {
        await ctx.step(`compensate:${name}`, () => undo(), options)
      }
    },
  }
}
