/**
 * The `payment-service` daemon: gRPC PaymentService on 50051 (mutual TLS), HTTP on 8085
 * (provider webhooks, /health, /readyz), Prometheus metrics on 9086; its own database.
 */
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { Gauge } from 'prom-client'
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import type { EventBus } from '../src/events/bus.js'
import { createApiApp } from '../src/http/app.js'
import { startHttpServer, type RunningHttpServer } from '../src/http/server.js'
import { scheduleJobEvery, type PeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { createMetrics, type Metrics } from '../src/metrics.js'
import { packageRoot } from '../src/package-root.js'
import { PaymentGrpcServer } from '../src/payments/grpc-server.js'
import { loadPricingConfig } from '../src/payments/pricing.js'
import { paymentProvidersFromSettings, type PaymentProviderSettings } from '../src/payments/providers/index.js'
import type { PaymentProvider } from '../src/payments/providers/provider.js'
import { ProviderRegistry } from '../src/payments/providers/registry.js'
import { providerReadiness } from '../src/payments/provider-health.js'
import { purgeProviderEvents } from '../src/payments/provider-events.js'
import { forgetSettledRetries } from '../src/payments/retries.js'
import { PaymentService } from '../src/payments/service.js'
import { PAYMENT_STATUSES } from '../src/payments/states.js'
import { ensurePaymentDevCertificates, paymentsCaDir } from '../src/payments/tls.js'
import { cardWebhookRoute } from '../src/payments/webhook-route.js'

export interface PaymentServiceSettings extends PaymentProviderSettings {
  NODEPLANE_DATA_DIR: string
  NODEPLANE_CONFIG_DIR?: string | undefined
  HTTP_HOST: string
  HTTP_BODY_LIMIT_BYTES: number
  PAYMENT_GRPC_HOST: string
  PAYMENT_GRPC_PORT: number
  PAYMENT_HTTP_PORT: number
  PAYMENT_METRICS_PORT: number
  PAYMENT_TLS_CA_FILE?: string | undefined
  PAYMENT_TLS_CERT_FILE?: string | undefined
  PAYMENT_TLS_KEY_FILE?: string | undefined
  PAYMENT_ALLOWED_CLIENTS: string[]
  PAYMENT_PRICING_FILE?: string | undefined
  PAYMENT_EXPIRY_CHECK_INTERVAL: number
  /** Default 1 minute. */
  PAYMENT_RECONCILE_INTERVAL?: number | undefined
  /** Default 3 days. */
  PAYMENT_PROVIDER_EVENT_RETENTION?: number | undefined
}

export interface RunningPaymentService {
  service: PaymentService
  /** host:port of the gRPC server */
  grpcTarget: string
  httpUrl: string
  metricsUrl: string
  caFile: string
  /** The periodic jobs (each under a database lease); `tick()` runs one now. */
  jobs: { expiry: PeriodicJob; reconciliation: PeriodicJob; providerEventsPurge: PeriodicJob }
  stop(): Promise<void>
}

const DEFAULT_RECONCILE_INTERVAL_MS = 60_000
const DEFAULT_PROVIDER_EVENT_RETENTION_MS = 3 * 86_400_000
const PROVIDER_EVENTS_PURGE_INTERVAL_MS = 3_600_000

export function pricingFile(settings: Pick<PaymentServiceSettings, 'PAYMENT_PRICING_FILE' | 'NODEPLANE_CONFIG_DIR'>): string {
  return settings.PAYMENT_PRICING_FILE ?? path.join(settings.NODEPLANE_CONFIG_DIR ?? packageRoot(), 'pricing.yaml')
}

const NO_PROVIDER = 'no payment provider is enabled: set PAYMENT_TEST_PROVIDER_ENABLED=true, CARD_PROVIDER_ENABLED=true or CRYPTO_PROVIDER_ENABLED=true'

function explicitTls(settings: PaymentServiceSettings) {
  return { PAYMENT_TLS_CA_FILE: settings.PAYMENT_TLS_CA_FILE, PAYMENT_TLS_CERT_FILE: settings.PAYMENT_TLS_CERT_FILE, PAYMENT_TLS_KEY_FILE: settings.PAYMENT_TLS_KEY_FILE }
}

/** Problems with PAYMENT_TLS_*: all three or none, and the files must exist. */
function tlsFileProblems(settings: PaymentServiceSettings): string[] {
  const set = Object.entries(explicitTls(settings)).filter(([, v]) => v !== undefined)
  if (set.length === 0) return []
  if (set.length !== 3) return ['PAYMENT_TLS_CA_FILE, PAYMENT_TLS_CERT_FILE and PAYMENT_TLS_KEY_FILE: set all three, or none for the development set']
  return set.filter(([, file]) => !fs.existsSync(file as string)).map(([name, file]) => `${name}=${JSON.stringify(file)}: file not found`)
}

/** Provider constructors only check and keep their settings; nothing touches the database before start(). */
const NO_DATABASE = (() => {
  throw new Error('the configuration check has no database')
}) as unknown as Db

/**
 * Every configuration problem the service can know before it connects to anything: the pricing
 * file, the providers (at least one enabled, each with its settings complete) and PAYMENT_TLS_*.
 * The daemon runs this first, so a bad setting is reported at once, together with the others,
 * instead of after (or hidden behind) connecting to NATS and the database.
 */
export function paymentServiceConfigProblems(settings: PaymentServiceSettings, logger: Logger): string[] {
  const problems: string[] = []
  const collect = (fn: () => void) => {
    try {
      fn()
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err
      problems.push(...err.problems)
    }
  }
  collect(() => {
    const pricing = loadPricingConfig(pricingFile(settings))
    const providers = paymentProvidersFromSettings(settings, { db: NO_DATABASE, logger, now: () => new Date() }, pricing)
    if (providers.length === 0) problems.push(NO_PROVIDER)
  })
  problems.push(...tlsFileProblems(settings))
  return problems
}

function serverTls(settings: PaymentServiceSettings, logger: Logger, localStack: boolean): { caFile: string; ca: Buffer; cert: Buffer; key: Buffer } {
  const explicit = explicitTls(settings)
  let files: { caFile: string; certFile: string; keyFile: string }
  if (Object.values(explicit).some((v) => v !== undefined)) {
    const problems = tlsFileProblems(settings)
    if (problems.length > 0) throw new ConfigError(problems)
    files = { caFile: explicit.PAYMENT_TLS_CA_FILE as string, certFile: explicit.PAYMENT_TLS_CERT_FILE as string, keyFile: explicit.PAYMENT_TLS_KEY_FILE as string }
  } else {
    const dev = ensurePaymentDevCertificates(paymentsCaDir(settings.NODEPLANE_DATA_DIR))
    // Under `nodeplane up` the development CA is the expected choice, not a production mistake.
    logger[localStack ? 'info' : 'warn']({ ca_file: dev.caFile }, 'serving PaymentService with the development CA; set PAYMENT_TLS_CA_FILE, PAYMENT_TLS_CERT_FILE and PAYMENT_TLS_KEY_FILE in production')
    files = { caFile: dev.caFile, certFile: dev.serverCertFile, keyFile: dev.serverKeyFile }
  }
  return { caFile: files.caFile, ca: fs.readFileSync(files.caFile), cert: fs.readFileSync(files.certFile), key: fs.readFileSync(files.keyFile) }
}

function paymentMetrics(metrics: Metrics, db: Db): void {
  new Gauge({
    name: 'payments',
    help: 'Payments in the payment service database, by status',
    labelNames: ['status'],
    registers: [metrics.registry],
    async collect() {
      const rows = (await db('payments').select('status').count({ count: '*' }).groupBy('status')) as Array<{ status: string; count: number | string }>
      for (const status of PAYMENT_STATUSES) this.set({ status }, Number(rows.find((r) => r.status === status)?.count ?? 0))
    },
  })
}

async function serveMetrics(metrics: Metrics, host: string, port: number): Promise<RunningHttpServer> {
  const app = {
    callback: () => async (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not found', details: 'metrics are served at GET /metrics' }))
        return
      }
      const body = await metrics.registry.metrics()
      res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body)
    },
  }
  return startHttpServer(app, { host, port })
}

function portInUse(variable: string, host: string, port: number) {
  return (err: NodeJS.ErrnoException): never => {
    if (err.code === 'EADDRINUSE' || err.code === 'EACCES') {
      throw new ConfigError([`${variable}: port ${port} on ${host} ${err.code === 'EADDRINUSE' ? 'is already in use' : 'needs privileges this user lacks'}`])
    }
    throw err
  }
}

export async function startPaymentService(
  settings: PaymentServiceSettings,
  deps: { db: Db; bus?: EventBus; logger: Logger; now?: () => Date; providers?: PaymentProvider[]; localStack?: boolean },
): Promise<RunningPaymentService> {
  const now = deps.now ?? (() => new Date())
  const logger = deps.logger
  const pricing = loadPricingConfig(pricingFile(settings))
  const tls = serverTls(settings, logger, deps.localStack ?? false)
  const providers = deps.providers ?? paymentProvidersFromSettings(settings, { db: deps.db, logger, now }, pricing)
  if (providers.length === 0) throw new ConfigError([NO_PROVIDER])
  const registry = new ProviderRegistry(providers)
  const service = new PaymentService({ db: deps.db, logger, pricing: () => pricing, providers: registry, now })
  const stops: Array<() => Promise<void>> = []
  const stopAll = async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch((err: unknown) => logger.error({ err }, 'error while stopping the payment service'))
  }
  try {
    const grpcServer = new PaymentGrpcServer({ service, logger, allowedClients: settings.PAYMENT_ALLOWED_CLIENTS, tls })
    const grpcPort = await grpcServer.listen(settings.PAYMENT_GRPC_HOST, settings.PAYMENT_GRPC_PORT).catch((err: Error) => {
      throw new ConfigError([`PAYMENT_GRPC_PORT: cannot listen on ${settings.PAYMENT_GRPC_HOST}:${settings.PAYMENT_GRPC_PORT} (${err.message.split('\n')[0]})`])
    })
    stops.push(() => grpcServer.close())

    const metrics = createMetrics('payment-service')
    paymentMetrics(metrics, deps.db)
    const card = registry.byName('card')
    const app = createApiApp({
      db: deps.db,
      ...(deps.bus ? { bus: deps.bus } : {}),
      logger,
      metrics,
      bodyLimitBytes: settings.HTTP_BODY_LIMIT_BYTES,
      routes: card ? [cardWebhookRoute({ provider: card, bodyLimitBytes: settings.HTTP_BODY_LIMIT_BYTES })] : [],
      readinessComponents: providerReadiness(providers, { now, cryptoPollIntervalMs: settings.CRYPTO_POLL_INTERVAL }),
      info: { title: 'nodeplane payment service HTTP', version: '1', description: 'Provider webhooks and health. The payment API itself is gRPC (proto/payment.proto).' },
    })
    const httpServer = await startHttpServer(app, { host: settings.HTTP_HOST, port: settings.PAYMENT_HTTP_PORT }).catch(portInUse('PAYMENT_HTTP_PORT', settings.HTTP_HOST, settings.PAYMENT_HTTP_PORT))
    stops.push(() => httpServer.close())
    const metricsServer = await serveMetrics(metrics, settings.HTTP_HOST, settings.PAYMENT_METRICS_PORT).catch(portInUse('PAYMENT_METRICS_PORT', settings.HTTP_HOST, settings.PAYMENT_METRICS_PORT))
    stops.push(() => metricsServer.close())

    for (const provider of providers) {
      if (!provider.start) continue
      await provider.start()
      stops.push(async () => provider.stop?.())
    }
    const jobs = { db: deps.db, logger, now }
    const expiry = scheduleJobEvery(jobs, {
      name: 'payment-session-expiry',
      intervalMs: settings.PAYMENT_EXPIRY_CHECK_INTERVAL,
      run: async (_at, logger) => {
        const expired = await service.expireSessions()
        if (expired > 0) logger.info({ expired }, 'payment sessions expired')
      },
    })
    stops.push(() => expiry.stop())
    const reconcileInterval = settings.PAYMENT_RECONCILE_INTERVAL ?? DEFAULT_RECONCILE_INTERVAL_MS
    const reconciliation = scheduleJobEvery(jobs, {
      name: 'payment-reconciliation',
      intervalMs: reconcileInterval,
      run: async (_at, logger) => {
        const reconciled = await service.reconcilePayments()
        if (reconciled > 0) logger.info({ reconciled }, 'payments reconciled with their provider')
      },
    })
    stops.push(() => reconciliation.stop())
    const retention = settings.PAYMENT_PROVIDER_EVENT_RETENTION ?? DEFAULT_PROVIDER_EVENT_RETENTION_MS
    const providerEventsPurge = scheduleJobEvery(jobs, {
      name: 'payment-provider-events-purge',
      intervalMs: PROVIDER_EVENTS_PURGE_INTERVAL_MS,
      run: async (at, logger) => {
        const purged = await purgeProviderEvents(deps.db, new Date(at.getTime() - retention))
        const forgotten = await forgetSettledRetries(deps.db)
        if (purged > 0 || forgotten > 0) logger.info({ purged, forgotten_retries: forgotten }, 'processed provider events past their retention purged')
      },
    })
    stops.push(() => providerEventsPurge.stop())

    const host = ['0.0.0.0', '::'].includes(settings.PAYMENT_GRPC_HOST) ? '127.0.0.1' : settings.PAYMENT_GRPC_HOST
    // The test provider's warning is the daemon command's (test-provider-warning.ts): only outside `up`.
    logger.info({ providers: providers.map((p) => p.name), methods: registry.methods(), grpc_port: grpcPort }, 'payment service started')
    return {
      service,
      grpcTarget: `${host.includes(':') ? `[${host}]` : host}:${grpcPort}`,
      httpUrl: httpServer.url,
      metricsUrl: `${metricsServer.url}/metrics`,
      caFile: tls.caFile,
      jobs: { expiry, reconciliation, providerEventsPurge },
      stop: stopAll,
    }
  } catch (err) {
    await stopAll()
    throw err
  }
}
