/**
 * The `health-evaluator` daemon (ARCHITECTURE.md, Processes): heartbeat and policy evaluation
 * with the migration trigger (src/health/evaluator.ts), maintenance recovery, and the
 * subscription cleanup scheduler (src/subscriptions/cleanup.ts). Every job takes its own
 * database lease, so any number of evaluators may share one database.
 */
import type { z } from 'zod'
import type { ChainSource } from '../src/config/chain-source.js'
import { healthEvaluatorEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import { scheduleHealthEvaluation, scheduleMaintenanceRecovery, type AfterEvaluation } from '../src/health/evaluator.js'
import type { PeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { scheduleSubscriptionCleanup } from '../src/subscriptions/cleanup.js'

export { healthEvaluatorEnv }

export type HealthEvaluatorSettings = Pick<
  z.infer<typeof healthEvaluatorEnv>,
  | 'PENDING_SUBSCRIPTION_TTL'
  | 'SUBSCRIPTION_GRACE_PERIOD'
  | 'SUBSCRIPTION_CLEANUP_INTERVAL'
  | 'HEALTH_EVALUATION_INTERVAL'
  | 'HEARTBEAT_TIMEOUT'
  | 'MIGRATION_GRACE'
  | 'MIGRATIONS_PER_CYCLE'
  | 'MIGRATION_COOLDOWN'
  | 'MAINTENANCE_RECOVERY_INTERVAL'
  | 'MAINTENANCE_RECOVERY_AFTER'
>

export interface HealthEvaluatorDeps {
  db: Db
  logger: Logger
  /** The chain catalogue: each profile's health policy. */
  chains: ChainSource
  now?: () => Date
}

export interface HealthEvaluator {
  /** Heartbeat and policy evaluation, then the migration trigger (`tick()` runs one cycle now, if this process holds the lease). */
  readonly healthEvaluation: PeriodicJob
  readonly maintenanceRecovery: PeriodicJob
  /** The subscription cleanup job. */
  readonly subscriptionCleanup: PeriodicJob
  /** Stops the schedulers; a pass in progress finishes first and the leases are released. */
  stop(): Promise<void>
}

export function startHealthEvaluator(settings: HealthEvaluatorSettings, deps: HealthEvaluatorDeps): HealthEvaluator {
  const clock = deps.now ? { now: deps.now } : {}
  const afterEvaluation: AfterEvaluation[] = []
  const healthEvaluation = scheduleHealthEvaluation(
    {
      heartbeatTimeoutMs: settings.HEARTBEAT_TIMEOUT,
      intervalMs: settings.HEALTH_EVALUATION_INTERVAL,
      migrationGraceMs: settings.MIGRATION_GRACE,
      migrationCooldownMs: settings.MIGRATION_COOLDOWN,
      migrationsPerCycle: settings.MIGRATIONS_PER_CYCLE,
    },
    { db: deps.db, logger: deps.logger.child({ component: 'health-evaluation' }), chains: deps.chains, afterEvaluation, ...clock },
  )
  const maintenanceRecovery = scheduleMaintenanceRecovery(
    { intervalMs: settings.MAINTENANCE_RECOVERY_INTERVAL, afterMs: settings.MAINTENANCE_RECOVERY_AFTER },
    { db: deps.db, logger: deps.logger.child({ component: 'maintenance-recovery' }), ...clock },
  )
  const subscriptionCleanup = scheduleSubscriptionCleanup({
    db: deps.db,
    logger: deps.logger,
    pendingTtlMs: settings.PENDING_SUBSCRIPTION_TTL,
    gracePeriodMs: settings.SUBSCRIPTION_GRACE_PERIOD,
    intervalMs: settings.SUBSCRIPTION_CLEANUP_INTERVAL,
    ...clock,
  })
  const jobs = [healthEvaluation, maintenanceRecovery, subscriptionCleanup]
  return {
    healthEvaluation,
    maintenanceRecovery,
    subscriptionCleanup,
    stop: async () => {
      await Promise.all(jobs.map((job) => job.stop()))
    },
  }
}
