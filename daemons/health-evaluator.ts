/**
 * The `health-evaluator` daemon (ARCHITECTURE.md, Processes). For now it runs the subscription
 * cleanup scheduler (src/subscriptions/cleanup.ts): unpaid subscriptions past their TTL,
 * expiry into the grace period, termination after it. Heartbeat and policy evaluation,
 * incidents, the migration trigger and uptime rollups join it in later issues.
 */
import type { z } from 'zod'
import { healthEvaluatorEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import type { PeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { scheduleSubscriptionCleanup } from '../src/subscriptions/cleanup.js'

export { healthEvaluatorEnv }

export type HealthEvaluatorSettings = Pick<z.infer<typeof healthEvaluatorEnv>, 'PENDING_SUBSCRIPTION_TTL' | 'SUBSCRIPTION_GRACE_PERIOD' | 'SUBSCRIPTION_CLEANUP_INTERVAL'>

export interface HealthEvaluatorDeps {
  db: Db
  logger: Logger
  now?: () => Date
}

export interface HealthEvaluator {
  /** The subscription cleanup job (`tick()` runs one pass now, if this process holds the lease). */
  readonly subscriptionCleanup: PeriodicJob
  /** Stops the schedulers; a pass in progress finishes first and the lease is released. */
  stop(): Promise<void>
}

export function startHealthEvaluator(settings: HealthEvaluatorSettings, deps: HealthEvaluatorDeps): HealthEvaluator {
  const subscriptionCleanup = scheduleSubscriptionCleanup({
    db: deps.db,
    logger: deps.logger,
    pendingTtlMs: settings.PENDING_SUBSCRIPTION_TTL,
    gracePeriodMs: settings.SUBSCRIPTION_GRACE_PERIOD,
    intervalMs: settings.SUBSCRIPTION_CLEANUP_INTERVAL,
    ...(deps.now ? { now: deps.now } : {}),
  })
  return {
    subscriptionCleanup,
    stop: () => subscriptionCleanup.stop(),
  }
}
