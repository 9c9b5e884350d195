/**
 * The `health-evaluator` daemon (ARCHITECTURE.md, Processes): heartbeat and policy evaluation
 * with incident auto-resolution and the migration trigger (src/health/evaluator.ts), maintenance
 * recovery, the incident consumer on the nodes' health events, the hourly uptime rollup
 * (src/uptime/rollup.ts), the subscription cleanup scheduler (src/subscriptions/cleanup.ts) and the
 * provisioning retries of paid subscriptions whose node failed (src/subscriptions/provision-retry.ts),
 * the node metrics purge (src/agent-gateway/metrics-retention.ts), and the hosts' SSH health probe
 * (src/hosts/probe.ts). Every job takes its own database lease and the
 * consumer is durable, so any number of evaluators may share one database and bus.
 */
import type { z } from 'zod'
import { scheduleNodeMetricsPurge } from '../src/agent-gateway/metrics-retention.js'
import type { ChainSource } from '../src/config/chain-source.js'
import { healthEvaluatorEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import type { BusSubscription, EventBus } from '../src/events/bus.js'
import { startIncidentConsumer } from '../src/health/incident-consumer.js'
import { advanceIncidentResolution } from '../src/health/incident-resolution.js'
import { incidentSettingsFromEnv } from '../src/health/incident-rules.js'
import { scheduleHealthEvaluation, scheduleMaintenanceRecovery, type AfterEvaluation } from '../src/health/evaluator.js'
import { openHostFleet, type HostFleetSettings } from '../src/hosts/fleet.js'
import { DEFAULT_PROBE_FAILURES_BEFORE_UNREACHABLE, scheduleHostProbe } from '../src/hosts/probe.js'
import type { PeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { scheduleSubscriptionCleanup } from '../src/subscriptions/cleanup.js'
import { DEFAULT_PROVISION_RETRY, scheduleProvisionRetries } from '../src/subscriptions/provision-retry.js'
import { scheduleUptimeRollup } from '../src/uptime/rollup.js'

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
  | 'INCIDENT_RESOLUTION_DEBOUNCE'
  | 'INCIDENT_FLAP_THRESHOLD'
  | 'INCIDENT_FLAP_WINDOW'
  | 'INCIDENT_FLAP_QUIET'
  | 'INCIDENT_ESCALATE_AFTER'
  | 'IDEMPOTENCY_KEY_TTL'
  | 'UPTIME_ROLLUP_INTERVAL'
  | 'UPTIME_ROLLUP_BATCH_SIZE'
  | 'UPTIME_RETENTION'
> &
  // Optional: the env schema gives defaults; a caller passing its own settings may leave them out.
  Partial<Pick<z.infer<typeof healthEvaluatorEnv>, 'PROVISION_RETRY_INTERVAL' | 'PROVISION_RETRY_ATTEMPTS' | 'PROVISION_RETRY_BACKOFF' | 'PROVISION_RETRY_BACKOFF_MAX'>> &
  // The host probe runs when the data directory (where the hosts' SSH keys are) is given.
  Partial<HostFleetSettings & Pick<z.infer<typeof healthEvaluatorEnv>, 'HOSTS_PROBE_INTERVAL' | 'HOSTS_PROBE_TIMEOUT' | 'HOSTS_PROBE_FAILURES'>>

export interface HealthEvaluatorDeps {
  db: Db
  /** Health events arrive here for the incident consumer. */
  bus: EventBus
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
  /** The hourly uptime buckets from the state log. */
  readonly uptimeRollup: PeriodicJob
  /** Retries provisioning of paid subscriptions whose node failed to provision (src/subscriptions/provision-retry.ts). */
  readonly provisionRetry: PeriodicJob
  /** Hourly: agents' reports (node metrics) older than the spec's 30 days are deleted. */
  readonly nodeMetricsPurge: PeriodicJob
  /** The hosts' SSH health probe (ready <-> unreachable); absent without a data directory. */
  readonly hostProbe?: PeriodicJob
  /** The incident consumer (durable `health-incidents` on the nodes' health events). */
  readonly incidents: BusSubscription
  /** Stops the consumer and the schedulers; a pass in progress finishes first and the leases are released. */
  stop(): Promise<void>
}

export async function startHealthEvaluator(settings: HealthEvaluatorSettings, deps: HealthEvaluatorDeps): Promise<HealthEvaluator> {
  const clock = deps.now ? { now: deps.now } : {}
  const incidentSettings = incidentSettingsFromEnv(settings)
  const incidentLogger = deps.logger.child({ component: 'incidents' })
  const incidents = await startIncidentConsumer({
    bus: deps.bus,
    db: deps.db,
    logger: incidentLogger,
    idempotencyTtlMs: settings.IDEMPOTENCY_KEY_TTL,
    flapping: incidentSettings.flapping,
    ...clock,
  })
  // Auto-resolution counts evaluation cycles, so it runs inside each cycle, under its lease.
  const afterEvaluation: AfterEvaluation[] = [
    (db, now) =>
      advanceIncidentResolution(db, {
        now,
        debounce: incidentSettings.resolutionDebounce,
        flapping: incidentSettings.flapping,
        escalateAfterMs: incidentSettings.escalateAfterMs,
        logger: incidentLogger,
      }),
  ]
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
  const uptimeRollup = scheduleUptimeRollup({
    db: deps.db,
    logger: deps.logger.child({ component: 'uptime-rollup' }),
    intervalMs: settings.UPTIME_ROLLUP_INTERVAL,
    batchSize: settings.UPTIME_ROLLUP_BATCH_SIZE,
    retentionMs: settings.UPTIME_RETENTION,
    ...clock,
  })
  const provisionRetry = scheduleProvisionRetries({
    db: deps.db,
    logger: deps.logger,
    intervalMs: settings.PROVISION_RETRY_INTERVAL ?? 60_000,
    settings: {
      maxAttempts: settings.PROVISION_RETRY_ATTEMPTS ?? DEFAULT_PROVISION_RETRY.maxAttempts,
      backoffMs: settings.PROVISION_RETRY_BACKOFF ?? DEFAULT_PROVISION_RETRY.backoffMs,
      maxBackoffMs: settings.PROVISION_RETRY_BACKOFF_MAX ?? DEFAULT_PROVISION_RETRY.maxBackoffMs,
    },
    flapping: incidentSettings.flapping,
    ...clock,
  })
  const nodeMetricsPurge = scheduleNodeMetricsPurge({ db: deps.db, logger: deps.logger, ...clock })
  const hostFleet = settings.NODEPLANE_DATA_DIR ? openHostFleet({ ...settings, NODEPLANE_DATA_DIR: settings.NODEPLANE_DATA_DIR }) : undefined
  const hostProbe = hostFleet
    ? scheduleHostProbe(
        { db: deps.db, logger: deps.logger, ...clock },
        { db: deps.db, pool: hostFleet.pool, keys: hostFleet.keys, timeoutMs: settings.HOSTS_PROBE_TIMEOUT ?? 10_000, failuresBeforeUnreachable: settings.HOSTS_PROBE_FAILURES ?? DEFAULT_PROBE_FAILURES_BEFORE_UNREACHABLE },
        settings.HOSTS_PROBE_INTERVAL ?? 30_000,
      )
    : undefined
  const jobs = [healthEvaluation, maintenanceRecovery, subscriptionCleanup, uptimeRollup, provisionRetry, nodeMetricsPurge, ...(hostProbe ? [hostProbe] : [])]
  return {
    healthEvaluation,
    maintenanceRecovery,
    subscriptionCleanup,
    uptimeRollup,
    provisionRetry,
    nodeMetricsPurge,
    ...(hostProbe ? { hostProbe } : {}),
    incidents,
    stop: async () => {
      await incidents.close()
      await Promise.all(jobs.map((job) => job.stop()))
      await hostFleet?.close()
    },
  }
}
