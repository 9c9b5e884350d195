/**
 * The health-evaluator's periodic jobs (docs/health.md), each under its own database lease so
 * that several evaluators on one database run each cycle once:
 * - `health-evaluation`, every HEALTH_EVALUATION_INTERVAL: heartbeat evaluation, policy
 *   evaluation, the passes that follow a cycle (incident auto-resolution), the migration trigger;
 * - `maintenance-recovery`, every MAINTENANCE_RECOVERY_INTERVAL.
 */
import type { ChainSource } from '../config/chain-source.js'
import type { Db } from '../db/knex.js'
import { cronEvery, schedulePeriodicJob, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { createEvaluationSummary, type CycleCounts } from './evaluation-summary.js'
import { evaluateHeartbeats, type HeartbeatEvaluationResult } from './heartbeat-evaluation.js'
import { recoverMaintenance } from './maintenance-recovery.js'
import { triggerMigrations, type MigrationTriggerResult } from './migration-trigger.js'
import { evaluatePolicies, type PolicyEvaluationResult } from './policy-evaluation.js'

export const HEALTH_EVALUATION_JOB = 'health-evaluation'
export const MAINTENANCE_RECOVERY_JOB = 'maintenance-recovery'

export interface HealthEvaluationSettings {
  /** HEARTBEAT_TIMEOUT (spec: 60 s). */
  heartbeatTimeoutMs: number
  /** HEALTH_EVALUATION_INTERVAL: one cycle over the fleet. */
  intervalMs: number
  /** MIGRATION_GRACE (spec: 60 s after down). */
  migrationGraceMs: number
  /** MIGRATION_COOLDOWN (spec: 1 hour). */
  migrationCooldownMs: number
  /** MIGRATIONS_PER_CYCLE */
  migrationsPerCycle: number
  /** How often the lease holder logs its summary line (default one minute). */
  summaryEveryMs?: number
}

/** A pass run after the evaluations of each cycle, in the same lease (incident auto-resolution). */
export type AfterEvaluation = (db: Db, now: Date) => Promise<unknown>

export interface HealthEvaluationDeps {
  db: Db
  logger: Logger
  chains: ChainSource
  now?: () => Date
  afterEvaluation?: readonly AfterEvaluation[]
  /** Lease holder name (default: host, pid and a random suffix); it names this evaluator in the lease trail. */
  holder?: string
}

export interface HealthCycleResult {
  heartbeats: HeartbeatEvaluationResult
  policies: PolicyEvaluationResult
  migrations: MigrationTriggerResult
}

/** One cycle over the whole fleet at `now`. */
export async function runHealthEvaluationCycle(settings: HealthEvaluationSettings, deps: HealthEvaluationDeps, now: Date): Promise<HealthCycleResult> {
  const { db, logger } = deps
  const heartbeats = await evaluateHeartbeats(db, { now, heartbeatTimeoutMs: settings.heartbeatTimeoutMs, intervalMs: settings.intervalMs, logger })
  const policies = await evaluatePolicies(db, { now, catalogue: deps.chains.current(), reportMaxAgeMs: settings.heartbeatTimeoutMs, logger })
  for (const pass of deps.afterEvaluation ?? []) await pass(db, now)
  const migrations = await triggerMigrations(db, {
    now,
    graceMs: settings.migrationGraceMs,
    cooldownMs: settings.migrationCooldownMs,
    maxPerCycle: settings.migrationsPerCycle,
    logger,
  })
  const moved = heartbeats.moves.length + policies.changes.length + migrations.started.length
  logger[moved > 0 ? 'info' : 'debug'](
    {
      moves: heartbeats.moves.length,
      counted: heartbeats.counted,
      health_changes: policies.changes.length,
      evaluated: policies.evaluated,
      migrations_started: migrations.started.length,
    },
    'health evaluation cycle',
  )
  return { heartbeats, policies, migrations }
}

/** What one cycle adds to the periodic summary line. */
export function cycleCounts(result: HealthCycleResult): CycleCounts {
  return {
    nodes_evaluated: result.policies.evaluated,
    transitions: result.heartbeats.moves.length + result.policies.changes.length,
    conflicts: result.heartbeats.conflicts + result.policies.conflicts,
    timeouts_counted: result.heartbeats.counted,
    migrations_started: result.migrations.started.length,
  }
}

/** How long a killed evaluator's peer waits for the evaluation lease (docs/deploy.md). */
export function evaluationLeaseMs(intervalMs: number): number {
  return Math.max(3 * intervalMs, 5_000)
}

export function scheduleHealthEvaluation(settings: HealthEvaluationSettings, deps: HealthEvaluationDeps): PeriodicJob {
  const summary = createEvaluationSummary(deps.logger, settings.summaryEveryMs)
  return schedulePeriodicJob({
    name: HEALTH_EVALUATION_JOB,
    cronTime: cronEvery(settings.intervalMs),
    // Three intervals: the holder keeps it from cycle to cycle (renewed during a long cycle), and
    // a killed holder's peer takes over within three intervals (5 s at least, for clock skew).
    leaseMs: evaluationLeaseMs(settings.intervalMs),
    intervalMs: settings.intervalMs,
    db: deps.db,
    logger: deps.logger,
    run: async (now) => summary.add(cycleCounts(await runHealthEvaluationCycle(settings, deps, now)), now),
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.holder ? { holder: deps.holder } : {}),
  })
}

export interface MaintenanceRecoverySettings {
  /** MAINTENANCE_RECOVERY_INTERVAL (spec: 30 minutes). */
  intervalMs: number
  /** MAINTENANCE_RECOVERY_AFTER */
  afterMs: number
}

export function scheduleMaintenanceRecovery(settings: MaintenanceRecoverySettings, deps: Omit<HealthEvaluationDeps, 'chains' | 'afterEvaluation' | 'holder'>): PeriodicJob {
  return schedulePeriodicJob({
    name: MAINTENANCE_RECOVERY_JOB,
    cronTime: cronEvery(settings.intervalMs),
    leaseMs: Math.max(2 * settings.intervalMs, 60_000),
    intervalMs: settings.intervalMs,
    db: deps.db,
    logger: deps.logger,
    run: async (now) => void (await recoverMaintenance(deps.db, { now, afterMs: settings.afterMs, logger: deps.logger })),
    ...(deps.now ? { now: deps.now } : {}),
  })
}
