import { healthEvaluatorEnv, startHealthEvaluator } from '../../daemons/health-evaluator.js'
import { openDatabase, startRelay } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { createLogger } from '../../src/log.js'
import { openChainCatalogueFromSettings } from '../../src/config/chain-source.js'
import { assertFencing } from '../../src/config/fencing.js'

export default class DaemonHealthEvaluator extends BaseCommand<typeof DaemonHealthEvaluator> {
  static override summary = 'Run the health-evaluator daemon: heartbeat and policy evaluation, incidents, the migration trigger, maintenance recovery, uptime rollups, the subscription cleanup scheduler, provisioning retries and the node metrics purge'
  static override description =
    'Every HEALTH_EVALUATION_INTERVAL (15s) it counts missed heartbeats (HEARTBEAT_TIMEOUT 60s; down at 3 in a row), returns nodes to healthy, judges application health by the chain profiles\' health policies, and starts a migration for nodes down longer than MIGRATION_GRACE (60s) outside their MIGRATION_COOLDOWN (1h). Every MAINTENANCE_RECOVERY_INTERVAL (30m) it recovers nodes left in maintenance. It raises incidents from the nodes\' health events (durable consumer health-incidents) and auto-resolves them after INCIDENT_RESOLUTION_DEBOUNCE (3) healthy cycles, and every UPTIME_ROLLUP_INTERVAL (5m) turns the state log into hourly uptime buckets. Every SUBSCRIPTION_CLEANUP_INTERVAL (1m) it deletes unpaid subscriptions past PENDING_SUBSCRIPTION_TTL (30m), moves expired ones into their SUBSCRIPTION_GRACE_PERIOD (24h) and terminates them after it. Every PROVISION_RETRY_INTERVAL (1m) it retries the provisioning of paid subscriptions whose node failed (PROVISION_RETRY_ATTEMPTS 3, backoff PROVISION_RETRY_BACKOFF 2m doubling), then opens a provision_failed incident (docs/node-lifecycle.md). Hourly it deletes node metrics (agent reports) older than 30 days. Replicas share each job through a database lease (docs/health.md). Needs NATS_URL (it runs an outbox relay) and a migrated database; stops on SIGTERM.'
  static override examples = ['NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> daemon health-evaluator']

  async run(): Promise<{ daemon: string }> {
    const { config, logger } = await loadSettingsWithSecrets(healthEvaluatorEnv, this.env(), (level) => createLogger({ level, daemon: 'health-evaluator' }))
    assertFencing(config)
    const resources = new Resources(logger)
    await resources.starting(async () => {
      const bus = resources.add(
        'bus',
        await openEventBus({ settings: config, service: 'control-plane', singleProcess: false, logger, name: 'health-evaluator' }),
        (b) => b.close(),
      )
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-health-evaluator', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      resources.add('outbox relay', startRelay(db, bus, config, logger), (r) => r.stop())
      const chains = resources.add('chain catalogue', await openChainCatalogueFromSettings(config, logger), (c) => c.close())
      resources.add('health evaluator', await startHealthEvaluator(config, { db, bus, logger, chains }), (h) => h.stop())
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { evaluation_interval_ms: config.HEALTH_EVALUATION_INTERVAL, cleanup_interval_ms: config.SUBSCRIPTION_CLEANUP_INTERVAL })
    return { daemon: 'health-evaluator' }
  }
}
