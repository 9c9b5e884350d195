/**
 * The engine's tables (workflow_runs, workflow_steps, workflow_signals, workflow_timers). One
 * function per operation, taking the knex handle first (STYLE.md, Storage). Workflow code never
 * sees these; it talks to the context (./context.ts).
 */
import type BetterSqlite3 from 'better-sqlite3'
import type { Knex } from 'knex'
import { fromJson, isPostgres, lockForClaim, lockRow, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isConcurrentWriteFailure } from '../db/errors.js'
import { isUuid, uuidv7 } from '../db/ids.js'
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
  // One statement: a lost race on (name, key) inserts nothing instead of raising, so it never
  // aborts a caller's transaction (Postgres) and needs no savepoint.
  const inserted = (await db('workflow_runs')
    .insert({ id, workflow_name: name, workflow_key: key, input: journal(input), status: 'pending', version: 1, created_at: now, updated_at: now })
    .onConflict(['workflow_name', 'workflow_key'])
    .ignore()
    .returning('*')) as Row[]
  if (inserted[0]) return { run: toRun(inserted[0]), created: true }
  const existing = await findRunByKey(db, name, key)
  if (!existing) throw new Error(`workflow run ${name}/${key} conflicted on insert but cannot be found`)
  return { run: existing, created: false }
}

export async function findRunByKey(db: Queryable, name: string, key: string): Promise<WorkflowRun | null> {
  const row = (await db('workflow_runs').where({ workflow_name: name, workflow_key: key }).first()) as Row | undefined
  return row ? toRun(row) : null
}

export async function getRun(db: Queryable, id: string): Promise<WorkflowRun | null> {
  if (!isUuid(id)) return null
  const row = (await db('workflow_runs').where({ id }).first()) as Row | undefined
  return row ? toRun(row) : null
}

export interface ListRunsFilter {
  status?: RunStatus
  name?: string
  /** The workflow key (a provision's node id, a rollout's id). */
  key?: string
  limit?: number
}

/** Newest first. */
export async function listRuns(db: Queryable, filter: ListRunsFilter = {}): Promise<WorkflowRun[]> {
  const q = runsQuery(db, filter).orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).limit(filter.limit ?? 50)
  return ((await q) as Row[]).map(toRun)
}

/** The runs matching `filter`, without order, limit or select (the API pages it). */
export function runsQuery(db: Queryable, filter: Omit<ListRunsFilter, 'limit'>) {
  const q = db('workflow_runs')
  if (filter.status) q.where({ status: filter.status })
  if (filter.name) q.where({ workflow_name: filter.name })
  if (filter.key) q.where({ workflow_key: filter.key })
  return q
}

export { toRun as runFromRow }

export async function listSteps(db: Queryable, runId: string): Promise<WorkflowStep[]> {
  const rows = (await db('workflow_steps').where({ run_id: runId }).orderByRaw('started_at IS NULL, started_at, seq IS NULL, seq, step_key')) as Row[]
  return rows.map(toStep)
}

export async function getStep(db: Queryable, runId: string, stepKey: string): Promise<WorkflowStep | null> {
  const row = (await db('workflow_steps').where({ run_id: runId, step_key: stepKey }).first()) as Row | undefined
  return row ? toStep(row) : null
}


export type SignalTarget = string | { name: string; key: string }

/**
 * Stores a signal for a run; a run sleeping on a wait becomes runnable at once (it re-checks
 * its waits on replay, so waking a run that waits for another signal is harmless).
 *
 * The run row is locked first. A worker going to sleep holds that row from its status update to
 * its commit and looks for signals in between; without the lock, on Postgres, a signal committed
 * inside that window was neither seen by the worker nor able to wake the run (its update still saw
 * the run running), and the run slept until its timeout.
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
    await lockRow(trx, trx('workflow_runs').select('id').where({ id: run.id }))
    await trx('workflow_signals').insert({ id, run_id: run.id, name: signalName, payload: toJson(payload ?? null), created_at: now })
    await trx('workflow_runs').where({ id: run.id, status: 'sleeping' }).update({ status: 'pending', wake_at: null, updated_at: now })
  })
  return { id, runId: run.id }
}

// ---- the worker's side: claims and lease-checked writes ----

const STEP_MERGE = ['status', 'attempt', 'result', 'error', 'started_at', 'timeout_at', 'next_attempt_at', 'finished_at']
  .map((c) => `${c} = excluded.${c}`)
  .concat(`heartbeat_at = case when excluded.status = 'running' then null else workflow_steps.heartbeat_at end`)
  .join(', ')

const LEASE_STEP_SQLITE = 'update workflow_runs set current_step = ?, version = ?, updated_at = ? where id = ? and lease_owner = ? and version = ?'

// `seq` (the run's version at the step's first write) is set on insert only: the merge keeps it.
const JOURNAL_STEP_SQLITE = `insert into workflow_steps (run_id, step_key, status, attempt, result, error, started_at, timeout_at, next_attempt_at, finished_at, seq)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
on conflict (run_id, step_key) do update set ${STEP_MERGE}`

export interface Lease {
  runId: string
  owner: string
  /** The run's version as this lease last wrote it; any other writer changes it. */
  version: number
}

/** A claimed run; `takenOverFrom` when it was interrupted: another worker's lease on it had expired. */
export interface ClaimedRun extends WorkflowRun {
  takenOverFrom: { owner: string; leaseExpiredAt: Date } | null
}

/**
 * Claims up to `limit` runnable runs in one short transaction: pending or running with no (or
 * an expired) lease — which takes over the runs of a dead orchestrator — or sleeping with
 * `wake_at` reached. `FOR UPDATE SKIP LOCKED` on Postgres lets orchestrators skip each other's
 * candidates; the version check on the update makes the claim safe on SQLite too. The lease the
 * claim replaced comes back from the candidates (read before the update) for the operator's log.
 */
export async function claimRuns(db: Knex, options: { owner: string; names: readonly string[]; limit: number; leaseMs: number; now: Date }): Promise<ClaimedRun[]> {
  if (options.names.length === 0 || options.limit <= 0) return []
  const { now } = options
  const candidates = lockForClaim(
    db,
    db('workflow_runs')
      .select('id', 'lease_owner', 'lease_expires_at')
      .whereIn('workflow_name', options.names as string[])
      .andWhere((q) =>
        q
          .where((r) => r.whereIn('status', ['pending', 'running']).andWhere((l) => l.whereNull('lease_expires_at').orWhere('lease_expires_at', '<=', now)))
          .orWhere((s) => s.where('status', 'sleeping').andWhere('wake_at', '<=', now)),
      )
      .orderBy('created_at')
      .limit(options.limit),
  )
  try {
    // One statement, so one transaction: the candidates (locked, skipping rows another claimer
    // holds, on Postgres) are updated in the same statement that chose them.
    const rows = (await db('workflow_runs')
      .withMaterialized('candidates', candidates)
      .whereIn('id', db.select('id').from('candidates'))
      .update({
        status: 'running',
        lease_owner: options.owner,
        lease_expires_at: new Date(now.getTime() + options.leaseMs),
        wake_at: null,
        version: db.raw('version + 1'),
        updated_at: now,
      })
      .returning([
        '*',
        db.raw('(select c.lease_owner from candidates c where c.id = workflow_runs.id) as previous_lease_owner'),
        db.raw('(select c.lease_expires_at from candidates c where c.id = workflow_runs.id) as previous_lease_expires_at'),
      ])) as Row[]
    return rows
      .map((row): ClaimedRun => {
        const previousOwner = (row.previous_lease_owner as string | null) ?? null
        const expiredAt = toDateOrNull(row.previous_lease_expires_at)
        return { ...toRun(row), takenOverFrom: previousOwner !== null && expiredAt !== null ? { owner: previousOwner, leaseExpiredAt: expiredAt } : null }
      })
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || a.id.localeCompare(b.id))
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
  const check = (q: Queryable) =>
    q('workflow_runs')
      .where({ id: lease.runId, lease_owner: lease.owner, version: lease.version })
      .update({ ...runChanges, version: lease.version + 1, updated_at: now })
  if (write) {
    await db.transaction(async (trx) => {
      if ((await check(trx)) !== 1) throw new LeaseLostError(lease.runId)
      await write(trx)
    })
  } else if ((await check(db)) !== 1) {
    // A lone update is atomic by itself: no transaction round trips needed.
    throw new LeaseLostError(lease.runId)
  }
  lease.version += 1
}

/**
 * A run's whole journal (its step rows by key), read once when a worker starts executing the
 * run. Only the lease holder writes step rows, so the worker keeps this copy current itself
 * instead of reading a row per step; a completed row never changes again, so even a copy held
 * past a lost lease answers completed steps correctly (and every write still checks the lease).
 */
export async function loadJournal(db: Queryable, runId: string): Promise<Map<string, WorkflowStep>> {
  const rows = (await db('workflow_steps').where({ run_id: runId })) as Row[]
  return new Map(rows.map((row) => [String(row.step_key), toStep(row)]))
}

/** One step row as the engine journals it (all columns but `heartbeat_at`, see journalStep). */
export type StepRecord = Omit<WorkflowStep, 'runId' | 'stepKey' | 'heartbeatAt'>

// Postgres: the lease check, the version bump and the step row in one statement (one round
// trip, atomic on its own), prepared once per connection. The step row is inserted only from
// the run row the lease-checked update returned: no row back means the lease was lost.
const JOURNAL_STEP_POSTGRES = `with lease as (
  update workflow_runs set current_step = ?, version = version + 1, updated_at = ?::timestamptz
  where id = ? and lease_owner = ? and version = ?::int
  returning id, version
)
insert into workflow_steps (run_id, step_key, status, attempt, result, error, started_at, timeout_at, next_attempt_at, finished_at, seq)
select id, ?, ?, ?::int, ?::jsonb, ?, ?::timestamptz, ?::timestamptz, ?::timestamptz, ?::timestamptz, version from lease
on conflict (run_id, step_key) do update set ${STEP_MERGE}
returning 1`

/**
 * Journals one step row (the whole row) under the lease: the run must still belong to
 * `lease.owner` at `lease.version`, which the same commit advances, and the run's
 * `current_step` becomes this step. Throws LeaseLostError otherwise, and nothing is written.
 * `heartbeat_at` is written out of band (recordHeartbeat): a new attempt clears it, other
 * writes keep it.
 */
export async function journalStep(db: Knex, lease: Lease, now: Date, stepKey: string, step: StepRecord): Promise<void> {
  const result = step.status === 'completed' ? journal(step.result) : null
  if (isPostgres(db)) {
    const bindings = [stepKey, now, lease.runId, lease.owner, lease.version, stepKey, step.status, step.attempt, result, step.error, step.startedAt, step.timeoutAt, step.nextAttemptAt, step.finishedAt]
    const written = (await db.raw(JOURNAL_STEP_POSTGRES, bindings).options({ name: 'nodeplane_journal_step' })) as { rowCount: number }
    if (written.rowCount !== 1) throw new LeaseLostError(lease.runId)
  } else {
    // SQLite has no writing CTE. better-sqlite3 is synchronous, so the two prepared statements
    // run in one immediate transaction in a single call, instead of four awaited knex queries
    // (~3x faster, bench/workflows.ts). Timestamps are epoch milliseconds, as knex binds them.
    const ms = (d: Date | null) => (d === null ? null : d.getTime())
    await withSqliteConnection(db, (conn) =>
      conn.transaction(() => {
        const checked = conn.prepare(LEASE_STEP_SQLITE).run(stepKey, lease.version + 1, now.getTime(), lease.runId, lease.owner, lease.version)
        if (checked.changes !== 1) throw new LeaseLostError(lease.runId)
        conn.prepare(JOURNAL_STEP_SQLITE).run(lease.runId, stepKey, step.status, step.attempt, result, step.error, ms(step.startedAt), ms(step.timeoutAt), ms(step.nextAttemptAt), ms(step.finishedAt), lease.version + 1)
      }).immediate(),
    )
  }
  lease.version += 1
}

/**
 * Runs `fn` on the pool's own better-sqlite3 connection (SQLite has one, so this waits for any
 * knex transaction in progress to finish, like any other query would).
 */
async function withSqliteConnection<T>(db: Knex, fn: (conn: BetterSqlite3.Database) => T): Promise<T> {
  const client = db.client as { acquireConnection(): Promise<BetterSqlite3.Database>; releaseConnection(conn: BetterSqlite3.Database): Promise<unknown> }
  const conn = await client.acquireConnection()
  try {
    return fn(conn)
  } finally {
    await client.releaseConnection(conn)
  }
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
