import { startApiServer } from '../../daemons/api-server.js'
import { openDatabase, startHousekeeping, startRelay } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiServerEnv } from '../../src/config/env.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { openChainCatalogueFromSettings } from '../../src/config/chain-source.js'
import { createLogger } from '../../src/log.js'
import { routeGrpcLogs } from '../../src/daemon/grpc-logs.js'
import { MasterKeyMissingError, openMasterKey } from '../../src/secrets/master-key.js'
import { paymentClientFromSettings } from '../../src/payments/client.js'

export default class DaemonApiServer extends BaseCommand<typeof DaemonApiServer> {
  static override summary = 'Run the api-server daemon: the REST API under /api/v1 (port API_SERVER_PORT, 8080)'
  static override description = 'Needs NATS_URL (events are shared with the other daemons over NATS JetStream) and a migrated database.'
  static override examples = ['NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> daemon api-server']

  async run(): Promise<{ daemon: string; url: string }> {
    const { config, logger, secrets } = await loadSettingsWithSecrets(apiServerEnv, this.env(), (level) => createLogger({ level, daemon: 'api-server' }))
    routeGrpcLogs(logger.child({ component: 'grpc' }))
    const resources = new Resources(logger)
    const url = await resources.starting(async () => {
      // Closed last: key export may still be unwrapping while the HTTP server drains.
      resources.add('secrets manager', secrets, (s) => s.close())
      const bus = resources.add(
        'bus',
        await openEventBus({ settings: config, service: 'control-plane', singleProcess: false, logger, name: 'api-server' }),
        (b) => b.close(),
      )
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-api-server', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      resources.add('outbox relay', startRelay(db, bus, config, logger), (r) => r.stop())
      resources.add('housekeeping', startHousekeeping(db, config, logger), (j) => j.stop())
      const masterKey = await openMasterKey(config, secrets).catch((err: unknown) => {
        if (!(err instanceof MasterKeyMissingError)) throw err
        logger.warn({ file: err.file }, 'no master key: key export and secret inputs answer 503 until `nodeplane secrets init`')
        return undefined
      })
      const chains = resources.add('chain catalogue', await openChainCatalogueFromSettings(config, logger), (c) => c.close())
      const payments = paymentClientFromSettings(config)
      if (payments) resources.add('payment client', payments, (c) => c.close())
      else logger.warn({ ca_dir: 'payments-ca' }, 'no payment service TLS files: payment endpoints answer 503 until PAYMENT_TLS_CA_FILE, PAYMENT_CLIENT_CERT_FILE and PAYMENT_CLIENT_KEY_FILE are set (or `nodeplane certs dev` is run)')
      const server = resources.add('http server', await startApiServer(config, { db, bus, logger, chains, ...(masterKey ? { masterKey } : {}), ...(payments ? { payments } : {}), readinessComponents: secrets.readiness() }), (s) => s.stop())
      return server.url
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { url })
    return { daemon: 'api-server', url }
  }
}
