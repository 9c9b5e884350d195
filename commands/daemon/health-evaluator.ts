import { healthEvaluatorEnv, startHealthEvaluator } from '../../daemons/health-evaluator.js'
import { openDatabase, startRelay } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { loadConfig } from '../../src/config/env.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { createLogger } from '../../src/log.js'

export default class DaemonHealthEvaluator extends BaseCommand<typeof DaemonHealthEvaluator> {
  static override summary = 'Run the health-evaluator daemon: for now the subscription cleanup scheduler (expiry, grace period, termination, unpaid subscriptions)'
  static override description =
    'Every SUBSCRIPTION_CLEANUP_INTERVAL (1m) it deletes pending_payment subscriptions older than PENDING_SUBSCRIPTION_TTL (30m), moves expired active subscriptions to expiring with a SUBSCRIPTION_GRACE_PERIOD (24h), and terminates expiring ones whose grace period ended (their nodes\' terminate workflows run on the orchestrator). Replicas share the job through a database lease. Heartbeat and policy evaluation, incidents and uptime rollups come in a later release. Needs NATS_URL (it runs an outbox relay) and a migrated database; stops on SIGTERM.'
  static override examples = ['NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> daemon health-evaluator']

  async run(): Promise<{ daemon: string }> {
    const config = loadConfig(healthEvaluatorEnv, this.env())
    const logger = createLogger({ level: config.LOG_LEVEL, daemon: 'health-evaluator' })
    const resources = new Resources(logger)
    await resources.starting(async () => {
      const bus = resources.add(
        'bus',
        await openEventBus({ natsUrl: config.NATS_URL, singleProcess: false, logger, name: 'health-evaluator' }),
        (b) => b.close(),
      )
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-health-evaluator', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      resources.add('outbox relay', startRelay(db, bus, config, logger), (r) => r.stop())
      resources.add('health evaluator', startHealthEvaluator(config, { db, logger }), (h) => h.stop())
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    logger.info({ cleanup_interval_ms: config.SUBSCRIPTION_CLEANUP_INTERVAL }, 'ready')
    return { daemon: 'health-evaluator' }
  }
}
