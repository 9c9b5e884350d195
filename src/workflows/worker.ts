/**
 * The workflow worker: claims runnable runs with a lease, executes them (./execution.ts) while
 * renewing the lease, and hands them back when they sleep. Several workers (one per
 * orchestrator process) share one database; a run whose worker died is taken over once its
 * lease expires.
 */
import os from 'node:os'
import crypto from 'node:crypto'
import type { Knex } from 'knex'
import type { Logger } from '../log.js'
import { RunExecution, type ExecutionOutcome } from './execution.js'
import { claimRuns, type ClaimedRun, type WorkflowRun } from './store.js'
import type { WorkflowRegistry } from './types.js'

export interface WorkflowWorkerOptions {
  db: Knex
  registry: WorkflowRegistry
  logger: Logger
  /** Who holds the leases; default host:pid:random. */
  owner?: string
  /** How long a claim lasts without renewal (default 30 s). */
  leaseMs?: number
  /** Real-time interval of lease renewal while a run executes (default leaseMs / 3). */
  renewIntervalMs?: number
  /** Real-time interval between claims when idle (default 1 s). */
  pollIntervalMs?: number
  /** Runs executed at once (default 8). */
  concurrency?: number
  now?: () => Date
}

export interface WorkflowWorker {
  readonly owner: string
  /** Polls in the background until stopped. */
  start(): void
  /** Claims what is runnable now and executes it to its next stop; resolves with the outcomes. */
  tick(): Promise<Array<{ runId: string; outcome: ExecutionOutcome | 'error' }>>
  /** Stops claiming; in-flight runs finish their current step, then release their leases. */
  stop(): Promise<void>
  inFlight(): number
}

export function defaultOwner(): string {
  return `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString('hex')}`
}

export function createWorkflowWorker(options: WorkflowWorkerOptions): WorkflowWorker {
  const owner = options.owner ?? defaultOwner()
  const leaseMs = options.leaseMs ?? 30_000
  const renewIntervalMs = options.renewIntervalMs ?? Math.max(100, Math.floor(leaseMs / 3))
  const pollIntervalMs = options.pollIntervalMs ?? 1_000
  const concurrency = options.concurrency ?? 8
  const now = options.now ?? (() => new Date())
  const logger = options.logger.child({ component: 'workflow-worker', owner })
  const running = new Map<string, Promise<ExecutionOutcome | 'error'>>()
  let stopping = false
  let pollTimer: NodeJS.Timeout | undefined
  let polling: Promise<unknown> | undefined

  function execute(run: WorkflowRun): Promise<ExecutionOutcome | 'error'> {
    const workflow = options.registry.get(run.workflowName)
    const log = logger.child({ workflowId: run.id, workflow: run.workflowName })
    if (!workflow) return Promise.resolve('error')
    const execution = new RunExecution({
      db: options.db,
      run,
      lease: { runId: run.id, owner, version: run.version },
      workflow,
      now,
      logger: log,
      leaseMs,
      stopping: () => stopping,
    })
    const renewal = setInterval(() => {
      execution.renew().catch((err: unknown) => log.warn({ err }, 'could not renew the lease'))
    }, renewIntervalMs)
    const done = execution
      .execute()
      .then(
        (outcome) => {
          log.debug({ outcome }, 'workflow execution ended')
          return outcome
        },
        (err: unknown) => {
          // The database failed under us: the lease expires and a worker retries the run.
          log.error({ err }, 'workflow execution failed')
          return 'error' as const
        },
      )
      .finally(() => {
        clearInterval(renewal)
        running.delete(run.id)
        if (!stopping && pollTimer) schedule(0)
      })
    running.set(run.id, done)
    return done
  }

  async function claim(): Promise<Array<Promise<{ runId: string; outcome: ExecutionOutcome | 'error' }>>> {
    if (stopping) return []
    const at = now()
    const runs = await claimRuns(options.db, { owner, names: options.registry.names(), limit: concurrency - running.size, leaseMs, now: at })
    for (const run of runs) logTakeover(run, at)
    return runs.filter((run) => !running.has(run.id)).map((run) => execute(run).then((outcome) => ({ runId: run.id, outcome })))
  }

  /** The operator's trail (issue 22, item 5): a run another worker was executing when it stopped renewing. */
  function logTakeover(run: ClaimedRun, at: Date): void {
    const from = run.takenOverFrom
    if (!from || from.owner === owner) return
    // The previous owner renewed last about one lease before its lease ran out (workers share WORKFLOW_LEASE).
    const lastRenewedAt = new Date(from.leaseExpiredAt.getTime() - leaseMs)
    logger.warn(
      {
        workflowId: run.id,
        workflow: run.workflowName,
        workflow_key: run.workflowKey,
        current_step: run.currentStep,
        previous_owner: from.owner,
        lease_expired_at: from.leaseExpiredAt.toISOString(),
        interrupted_ms: Math.max(0, at.getTime() - lastRenewedAt.getTime()),
      },
      'took over an interrupted workflow run',
    )
  }

  function schedule(delayMs: number): void {
    clearTimeout(pollTimer)
    pollTimer = setTimeout(() => {
      polling = claim()
        .catch((err: unknown) => {
          logger.error({ err }, 'could not claim workflow runs')
          return []
        })
        .finally(() => {
          if (!stopping) schedule(pollIntervalMs)
        })
    }, delayMs)
  }

  return {
    owner,
    start() {
      logger.info({ lease_ms: leaseMs, concurrency, workflows: options.registry.names() }, 'workflow worker started')
      schedule(0)
    },
    async tick() {
      return Promise.all(await claim())
    },
    async stop() {
      stopping = true
      clearTimeout(pollTimer)
      pollTimer = undefined
      await polling
      await Promise.allSettled([...running.values()])
    },
    inFlight: () => running.size,
  }
}
