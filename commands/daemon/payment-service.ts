import { paymentServiceConfigProblems, startPaymentService } from '../../daemons/payment-service.js'
import { openDatabase, startHousekeeping, startRelay } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { paymentServiceEnv } from '../../src/config/env.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { ConfigError } from '../../src/errors.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { createLogger } from '../../src/log.js'
import { routeGrpcLogs } from '../../src/daemon/grpc-logs.js'
import { warnIfTestProviderEnabled } from '../../src/payments/providers/test-provider-warning.js'

export default class DaemonPaymentService extends BaseCommand<typeof DaemonPaymentService> {
  static override summary = 'Run the payment-service daemon: gRPC PaymentService (mTLS, 50051), webhooks and health (8085), metrics (9086)'
  static override description =
    'Uses its own database (PAYMENTS_DATABASE_URL, migrated with `nodeplane db migrate`) and publishes payment.completed, payment.failed and payment.canceled on the PAYMENTS stream (NATS_URL required). Enable at least one provider: PAYMENT_TEST_PROVIDER_ENABLED, CARD_PROVIDER_ENABLED or CRYPTO_PROVIDER_ENABLED; each takes only its methods (PAYMENT_TEST_PROVIDER_METHODS for the test provider). Jobs under database leases: session expiry (PAYMENT_EXPIRY_CHECK_INTERVAL 30s), reconciliation of payments whose webhook never arrived (PAYMENT_RECONCILE_INTERVAL 1m) and the hourly purge of webhook event ids past PAYMENT_PROVIDER_EVENT_RETENTION (3d). /readyz on 8085 answers 503 naming a provider that is down. See docs/payments.md.'
  static override examples = [
    'NATS_URL=nats://127.0.0.1:4222 PAYMENTS_DATABASE_URL=postgres://payments@db/payments CARD_PROVIDER_ENABLED=true <%= config.bin %> daemon payment-service',
  ]

  async run(): Promise<{ daemon: string; grpc: string; http: string; metrics: string }> {
    // Card processor keys and database credentials may come from files or Vault (docs/secrets.md).
    const { config, logger } = await loadSettingsWithSecrets(paymentServiceEnv, this.env(), (level) => createLogger({ level, daemon: 'payment-service' }))
    routeGrpcLogs(logger.child({ component: 'grpc' }))
    // Everything knowable from the settings alone, in one message, before connecting to anything.
    const problems = [
      ...(config.NATS_URL ? [] : ['NATS_URL: required when a daemon runs as its own process (set it to nats://host:4222); only `nodeplane up` runs without NATS']),
      ...paymentServiceConfigProblems(config, logger),
    ]
    if (problems.length > 0) throw new ConfigError(problems)
    // Only here: `nodeplane up` starts the service itself, where the test provider is the point.
    warnIfTestProviderEnabled(config, logger)
    const resources = new Resources(logger)
    const running = await resources.starting(async () => {
      const bus = resources.add('bus', await openEventBus({ settings: config, service: 'payment-service', singleProcess: false, logger, name: 'payment-service' }), (b) => b.close())
      const db = resources.add('database', await openDatabase(config.PAYMENTS_DATABASE_URL, 'nodeplane-payment-service', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'payments')
      resources.add('outbox relay', startRelay(db, bus, config, logger), (r) => r.stop())
      resources.add('housekeeping', startHousekeeping(db, config, logger), (j) => j.stop())
      return resources.add('payment service', await startPaymentService(config, { db, bus, logger }), (s) => s.stop())
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { grpc: running.grpcTarget, http: running.httpUrl, metrics: running.metricsUrl })
    return { daemon: 'payment-service', grpc: running.grpcTarget, http: running.httpUrl, metrics: running.metricsUrl }
  }
}
