/**
 * The engine's tables (workflow_runs, workflow_steps, workflow_signals, workflow_timers). One
 * function per operation, taking the knex handle first (STYLE.md, Storage). Workflow code never
 * sees these; it talks to the context (./context.ts).
 */
import type { Knex } from 'knex'
import { fromJson, lockForClaim, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isConcurrentWriteFailure, isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { NotFoundError } from '../errors.js'
import { LeaseLostError } from './errors.js'

export const RUN_STATUSES = ['pending', 'running', 'sleeping', 'completed', 'failed'] as const
export type RunStatus = (typeof RUN_STATUSES)[number]
export type StepStatus = 'running' | 'retrying' | 'completed' | 'failed' | 'waiting'

export interface WorkflowRun {
  id: string
  workflowName: string
  workflowKey: string
  input: unknown
  status: RunStatus
  result: unknown
  error: string | null
  currentStep: string | null
  leaseOwner: string | null
  leaseExpiresAt: Date | null
  wakeAt: Date | null
  version: number
  createdAt: Date
  updatedAt: Date
  completedAt: Date | null
}

export interface WorkflowStep {
  runId: string
  stepKey: string
  status: StepStatus
  attempt: number
  /** The journaled value, unwrapped (see `journal`). */
  result: unknown
  error: string | null
  startedAt: Date | null
  heartbeatAt: Date | null
  timeoutAt: Date | null
  nextAttemptAt: Date | null
  finishedAt: Date | null
}

type Row = Record<string, unknown>

function toRun(row: Row): WorkflowRun {
  return {
    id: String(row.id),
    workflowName: String(row.workflow_name),
    workflowKey: String(row.workflow_key),
    input: unjournal(row.input),
    status: row.status as RunStatus,
    result: unjournal(row.result) ?? null,
    error: (row.error as string | null) ?? null,
    currentStep: (row.current_step as string | null) ?? null,
    leaseOwner: (row.lease_owner as string | null) ?? null,
    leaseExpiresAt: toDateOrNull(row.lease_expires_at),
    wakeAt: toDateOrNull(row.wake_at),
    version: Number(row.version),
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    completedAt: toDateOrNull(row.completed_at),
  }
}

/**
 * Inputs and results are stored wrapped as `{"v": value}`: a step that returns `undefined`
 * replays as `undefined`, and a bare JSON string reads back the same from jsonb (parsed by the
 * driver) and from SQLite text.
 */
export function journal(value: unknown): string {
  return toJson({ v: value })
}

function unjournal(value: unknown): unknown {
  if (value === null || value === undefined) return undefined
  return fromJson<{ v?: unknown }>(value).v
}

function toStep(row: Row): WorkflowStep {
  return {
    runId: String(row.run_id),
    stepKey: String(row.step_key),
    status: row.status as StepStatus,
    attempt: Number(row.attempt),
    result: unjournal(row.result),
    error: (row.error as string | null) ?? null,
    startedAt: toDateOrNull(row.started_at),
    heartbeatAt: toDateOrNull(row.heartbeat_at),
    timeoutAt: toDateOrNull(row.timeout_at),
    nextAttemptAt: toDateOrNull(row.next_attempt_at),
    finishedAt: toDateOrNull(row.finished_at),
  }
}

export interface StartOptions {
  /** Idempotency key: a second start with the same (name, key) returns the existing run. */
  key?: string
  now?: Date
}

export interface StartResult {
  run: WorkflowRun
  /** False when a run with this (name, key) existed already. */
  created: boolean
}

export async function startWorkflow(db: Queryable, name: string, input: unknown, options: StartOptions = {}): Promise<StartResult> {
  const now = options.now ?? new Date()
  const id = uuidv7(now.getTime())
  const key = options.key ?? id
  const existing = await findRunByKey(db, name, key)
  if (existing) return { run: existing, created: false }
  try {
    // A savepoint when `db` is a transaction, so a lost race does not abort the caller's (Postgres).
    await db.transaction(async (trx) => {
      await trx('workflow_runs').insert({
        id,
        workflow_name: name,
        workflow_key: key,
        input: journal(input),
        status: 'pending',
        version: 1,
        created_at: now,
        updated_at: now,
      })
    })
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
    const winner = await findRunByKey(db, name, key)
    if (!winner) throw err
    return { run: winner, created: false }
  }
  return { run: (await getRun(db, id)) as WorkflowRun, created: true }
}

export async function findRunByKey(db: Queryable, name: string, key: string): Promise<WorkflowRun | null> {
  const row = (await db('workflow_runs').where({ workflow_name: name, workflow_key: key }).first()) as Row | undefined
  return row ? toRun(row) : null
}

export async function getRun(db: Queryable, id: string): Promise<WorkflowRun | null> {
  if (!UUID.test(id)) return null
  const row = (await db('workflow_runs').where({ id }).first()) as Row | undefined
  return row ? toRun(row) : null
}

export interface ListRunsFilter {
  status?: RunStatus
  name?: string
  limit?: number
}

/** Newest first. */
export async function listRuns(db: Queryable, filter: ListRunsFilter = {}): Promise<WorkflowRun[]> {
  const q = db('workflow_runs').orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).limit(filter.limit ?? 50)
  if (filter.status) q.where({ status: filter.status })
  if (filter.name) q.where({ workflow_name: filter.name })
  return ((await q) as Row[]).map(toRun)
}

export async function listSteps(db: Queryable, runId: string): Promise<WorkflowStep[]> {
  const rows = (await db('workflow_steps').where({ run_id: runId }).orderByRaw('started_at IS NULL, started_at, step_key')) as Row[]
  return rows.map(toStep)
}

export async function getStep(db: Queryable, runId: string, stepKey: string): Promise<WorkflowStep | null> {
  const row = (await db('workflow_steps').where({ run_id: runId, step_key: stepKey }).first()) as Row | undefined
  return row ? toStep(row) : null
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export type SignalTarget = string | { name: string; key: string }

/**
 * Stores a signal for a run; a run sleeping on a wait becomes runnable at once (it re-checks
 * its waits on replay, so waking a run that waits for another signal is harmless).
 */
export async function sendSignal(db: Queryable, target: SignalTarget, signalName: string, payload?: unknown, options: { now?: Date } = {}): Promise<{ id: string; runId: string }> {
  const now = options.now ?? new Date()
  const run = typeof target === 'string' ? await getRun(db, target) : await findRunByKey(db, target.name, target.key)
  if (!run) {
    const what = typeof target === 'string' ? target : `${target.name}/${target.key}`
    throw new NotFoundError(`no workflow run ${what}`, `no workflow run ${what}; list runs with \`nodeplane workflow list\``)
  }
  const id = uuidv7(now.getTime())
  await db.transaction(async (trx) => {
    await trx('workflow_signals').insert({ id, run_id: run.id, name: signalName, payload: toJson(payload ?? null), created_at: now })
    await trx('workflow_runs').where({ id: run.id, status: 'sleeping' }).update({ status: 'pending', wake_at: null, updated_at: now })
  })
  return { id, runId: run.id }
}

// ---- the worker's side: claims and lease-checked writes ----

export interface Lease {
  runId: string
  owner: string
  /** The run's version as this lease last wrote it; any other writer changes it. */
  version: number
}

/**
 * Claims up to `limit` runnable runs in one short transaction: pending or running with no (or
 * an expired) lease — which takes over the runs of a dead orchestrator — or sleeping with
 * `wake_at` reached. `FOR UPDATE SKIP LOCKED` on Postgres lets orchestrators skip each other's
 * candidates; the version check on the update makes the claim safe on SQLite too.
 */
export async function claimRuns(db: Knex, options: { owner: string; names: readonly string[]; limit: number; leaseMs: number; now: Date }): Promise<WorkflowRun[]> {
  if (options.names.length === 0 || options.limit <= 0) return []
  const { now } = options
  try {
    return await db.transaction(async (trx) => {
      const candidates = (await lockForClaim(
        trx,
        trx('workflow_runs')
          .select('id', 'version')
          .whereIn('workflow_name', options.names as string[])
          .andWhere((q) =>
            q
              .where((r) => r.whereIn('status', ['pending', 'running']).andWhere((l) => l.whereNull('lease_expires_at').orWhere('lease_expires_at', '<=', now)))
              .orWhere((s) => s.where('status', 'sleeping').andWhere('wake_at', '<=', now)),
          )
          .orderBy('created_at')
          .limit(options.limit),
      )) as Row[]
      const claimed: string[] = []
      for (const c of candidates) {
        const n = await trx('workflow_runs')
          .where({ id: c.id as string, version: Number(c.version) })
          .update({
            status: 'running',
            lease_owner: options.owner,
            lease_expires_at: new Date(now.getTime() + options.leaseMs),
            wake_at: null,
            version: Number(c.version) + 1,
            updated_at: now,
          })
        if (n === 1) claimed.push(c.id as string)
      }
      if (claimed.length === 0) return []
      return ((await trx('workflow_runs').whereIn('id', claimed).orderBy('created_at')) as Row[]).map(toRun)
    })
  } catch (err) {
    // Another process holds SQLite's write lock past busy_timeout, or Postgres aborted us: claim next poll.
    if (isConcurrentWriteFailure(err)) return []
    throw err
  }
}

/**
 * Runs `write` in a transaction after checking (and advancing) the lease: the run still
 * belongs to `lease.owner` at `lease.version`. Throws LeaseLostError otherwise, and nothing
 * is written. This is what keeps a step from being journaled by two processes.
 */
export async function writeUnderLease(
  db: Knex,
  lease: Lease,
  now: Date,
  runChanges: Record<string, unknown>,
  write?: (trx: Knex.Transaction) => Promise<void>,
): Promise<void> {
  await db.transaction(async (trx) => {
    const n = await trx('workflow_runs')
      .where({ id: lease.runId, lease_owner: lease.owner, version: lease.version })
      .update({ ...runChanges, version: lease.version + 1, updated_at: now })
    if (n !== 1) throw new LeaseLostError(lease.runId)
    if (write) await write(trx)
  })
  lease.version += 1
}

/** Extends the lease without changing the version (the writer's check stays valid). */
export async function renewLease(db: Queryable, lease: Lease, leaseMs: number, now: Date): Promise<boolean> {
  const n = await db('workflow_runs')
    .where({ id: lease.runId, lease_owner: lease.owner, version: lease.version })
    .update({ lease_expires_at: new Date(now.getTime() + leaseMs) })
  return n === 1
}

export async function upsertStep(trx: Queryable, runId: string, stepKey: string, fields: Record<string, unknown>): Promise<void> {
  const row = { run_id: runId, step_key: stepKey, ...fields }
  if ('result' in row) row.result = row.result === undefined ? null : journal(row.result)
  await trx('workflow_steps').insert(row).onConflict(['run_id', 'step_key']).merge(Object.keys(fields))
}

export async function recordHeartbeat(db: Queryable, runId: string, stepKey: string, now: Date): Promise<void> {
  await db('workflow_steps').where({ run_id: runId, step_key: stepKey, status: 'running' }).update({ heartbeat_at: now })
}

export interface PendingSignal {
  id: string
  payload: unknown
}

export async function oldestUnconsumedSignal(db: Queryable, runId: string, name: string): Promise<PendingSignal | null> {
  const row = (await db('workflow_signals').where({ run_id: runId, name }).whereNull('consumed_at').orderBy([{ column: 'created_at' }, { column: 'id' }]).first()) as Row | undefined
  return row ? { id: String(row.id), payload: fromJson(row.payload) } : null
}

export async function consumeSignal(trx: Queryable, signalId: string, now: Date): Promise<void> {
  await trx('workflow_signals').where({ id: signalId }).whereNull('consumed_at').update({ consumed_at: now })
}

export async function getTimer(db: Queryable, runId: string, timerKey: string): Promise<{ fireAt: Date; firedAt: Date | null } | null> {
  const row = (await db('workflow_timers').where({ run_id: runId, timer_key: timerKey }).first()) as Row | undefined
  return row ? { fireAt: toDate(row.fire_at), firedAt: toDateOrNull(row.fired_at) } : null
}

export async function insertTimer(trx: Queryable, runId: string, timerKey: string, fireAt: Date): Promise<void> {
  await trx('workflow_timers').insert({ run_id: runId, timer_key: timerKey, fire_at: fireAt }).onConflict(['run_id', 'timer_key']).ignore()
}

export async function markTimerFired(trx: Queryable, runId: string, timerKey: string, now: Date): Promise<void> {
  await trx('workflow_timers').where({ run_id: runId, timer_key: timerKey }).update({ fired_at: now })
}

/** The current step row of each run (for list views), in one query. */
export async function currentSteps(db: Queryable, runs: readonly WorkflowRun[]): Promise<Map<string, WorkflowStep>> {
  const wanted = runs.filter((r) => r.currentStep !== null)
  if (wanted.length === 0) return new Map()
  const rows = (await db('workflow_steps').whereIn(
    ['run_id', 'step_key'],
    wanted.map((r) => [r.id, r.currentStep as string]),
  )) as Row[]
  return new Map(rows.map((row) => [String(row.run_id), toStep(row)]))
}
