import { lifecycleDeps, orchestratorEnv, orchestratorWorkflows, startOrchestrator, startPaymentActivation } from '../../daemons/orchestrator.js'
import { openDatabase } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { createLogger } from '../../src/log.js'
import { routeGrpcLogs } from '../../src/daemon/grpc-logs.js'
import { openMasterKey } from '../../src/secrets/master-key.js'
import { ensureServerKeyPair } from '../../src/secrets/server-key.js'
import { openChainCatalogueFromSettings } from '../../src/config/chain-source.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { scheduleBackupPurge } from '../../src/provisioning/backup-store.js'
import { paymentClientFromSettings } from '../../src/payments/client.js'
import { unconfiguredPaymentLookup } from '../../src/subscriptions/payment-confirmation.js'

export default class DaemonOrchestrator extends BaseCommand<typeof DaemonOrchestrator> {
  static override summary = 'Run the orchestrator daemon: executes durable workflows (provisioning, migrations, rollouts) and activates paid subscriptions'
  static override description =
    'Needs a migrated database. Several orchestrators may share one Postgres; a run held by a killed orchestrator is taken over after WORKFLOW_LEASE (30s). It also consumes payment events (durable consumer main-app-payment on payment.*), so it needs NATS_URL: payment.completed activates the subscriptions and starts their provisioning. Every 5 minutes, under a database lease, it deletes migration snapshots in BACKUP_STORE_DIR older than 24 h (the backup-purge job; the directory must be the one the agents on the hosts write to). On SIGTERM, the payment consumer stops, steps in flight finish (within SHUTDOWN_TIMEOUT) and their runs are handed back.'
  static override examples = ['NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> daemon orchestrator']

  async run(): Promise<{ daemon: string; owner: string }> {
    const { config, logger, secrets } = await loadSettingsWithSecrets(orchestratorEnv, this.env(), (level) => createLogger({ level, daemon: 'orchestrator' }))
    routeGrpcLogs(logger.child({ component: 'grpc' }))
    const resources = new Resources(logger)
    const owner = await resources.starting(async () => {
      // Closed last: provisioning steps in flight may still be wrapping keys.
      resources.add('secrets manager', secrets, (s) => s.close())
      const bus = resources.add('bus', await openEventBus({ settings: config, service: 'control-plane', singleProcess: false, logger, name: 'orchestrator' }), (b) => b.close())
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-orchestrator', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      // Added after the database, so it is stopped (drained) before the database closes.
      // Provisioning generates and wraps keys: without the master key it cannot run at all.
      const masterKey = await openMasterKey(config, secrets)
      // Captured chain keys come back sealed to the server key: make sure there is one.
      await ensureServerKeyPair(db, masterKey)
      const chains = resources.add('chain catalogue', await openChainCatalogueFromSettings(config, logger), (c) => c.close())
      // Closed after the worker: the ssh provider's connections to the host fleet.
      const lifecycle = resources.add('host fleet connections', await lifecycleDeps(config, { db, logger, masterKey, chains }), (l) => l.close())
      const worker = resources.add('workflow worker', startOrchestrator(config, { db, logger, registry: orchestratorWorkflows(lifecycle) }), (w) => w.stop())
      resources.add('backup purge', scheduleBackupPurge({ db, logger, storeUrl: lifecycle.backupStoreUrl }), (j) => j.stop())
      // Every payment.completed is confirmed with the payment service before it activates anything.
      const client = paymentClientFromSettings(config)
      if (client) resources.add('payment client', client, (c) => c.close())
      else logger.warn('no payment service client (PAYMENT_SERVICE_URL, PAYMENT_TLS_CA_FILE, PAYMENT_CLIENT_CERT_FILE, PAYMENT_CLIENT_KEY_FILE): payment.completed events wait unconfirmed')
      const payments = client ?? unconfiguredPaymentLookup()
      // Added last: closed first, so no payment event is handled while the worker and database close.
      resources.add('payment consumer', await startPaymentActivation(config, { bus, db, logger, chains, payments }), (s) => s.close())
      return worker.owner
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { owner })
    return { daemon: 'orchestrator', owner }
  }
}
