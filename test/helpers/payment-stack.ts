/**
 * The purchase journey's stack in one process, every part real (test/e2e/payment-journey*.test.ts):
 * a control-plane and a payments database, an outbox relay on each, the payment service daemon
 * (`startPaymentService`: mutual-TLS gRPC, the test provider), the control plane's PaymentClient,
 * the api-server routes, the payment consumer (`startPaymentActivation`), the subscription
 * cleanup (`startHealthEvaluator`) and, optionally, the node lifecycle (real agent-gateway, local
 * provider starting real node agents, the workflow worker). One clock for all of them: it runs
 * with wall time plus an offset the test moves, so nothing waits for a rule, and polling loops
 * inside the stack (agent waits, command timeouts) still see time pass.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { staticChainSource, type ChainSource } from '../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../src/config/chains.js'
import { paymentConsumerEnv } from '../../src/config/env.js'
import type { Db } from '../../src/db/knex.js'
import type { BusSubscription, EventBus } from '../../src/events/bus.js'
import { OutboxRelay } from '../../src/events/relay.js'
import { createLogger, type Logger } from '../../src/log.js'
import { PaymentClient } from '../../src/payments/client.js'
import { CONTROL_PLANE_CLIENT_NAME, ensurePaymentDevCertificates, paymentsCaDir } from '../../src/payments/tls.js'
import type { WorkflowWorker } from '../../src/workflows/index.js'
import { startHealthEvaluator, type HealthEvaluator } from '../../daemons/health-evaluator.js'
import { startPaymentActivation } from '../../daemons/orchestrator.js'
import { startPaymentService, type PaymentServiceSettings, type RunningPaymentService } from '../../daemons/payment-service.js'
import { newKey, newUser, startAuthApi, type AuthApi, type TestClock } from '../integration/auth/api-harness.js'
import { Resources } from '../integration/http/harness.js'
import { lifecycleSetting, startLifecycleWorker, type LifecycleSetting } from '../integration/provisioning/harness.js'
import { createTestDatabase, type Dialect, type TestDatabase } from './db.js'

export const DAY_MS = 86_400_000
export const HOUR_MS = 3_600_000
export const IDEMPOTENCY_KEY_TTL = 7 * DAY_MS
/** The orchestrator's default. */
export const PAYMENT_CONSUMER_CONCURRENCY = paymentConsumerEnv.PAYMENT_CONSUMER_CONCURRENCY.parse(undefined)
export const GRACE_PERIOD_MS = 24 * HOUR_MS

/** Wall time plus an offset: `advance` moves it for every part of the stack at once. */
export function sharedClock(): TestClock {
  let offset = 0
  return {
    get ms() {
      return Date.now() + offset
    },
    set ms(value: number) {
      offset = value - Date.now()
    },
    now: () => new Date(Date.now() + offset),
    advance(ms: number) {
      offset += ms
    },
  }
}

export function paymentServiceSettings(dataDir: string, overrides: Partial<PaymentServiceSettings> = {}): PaymentServiceSettings {
  return {
    NODEPLANE_DATA_DIR: dataDir,
    HTTP_HOST: '127.0.0.1',
    HTTP_BODY_LIMIT_BYTES: 1024 * 1024,
    PAYMENT_GRPC_HOST: '127.0.0.1',
    PAYMENT_GRPC_PORT: 0,
    PAYMENT_HTTP_PORT: 0,
    PAYMENT_METRICS_PORT: 0,
    PAYMENT_ALLOWED_CLIENTS: [CONTROL_PLANE_CLIENT_NAME],
    PAYMENT_EXPIRY_CHECK_INTERVAL: 30_000,
    PAYMENT_TEST_PROVIDER_ENABLED: true,
    PAYMENT_TEST_PROVIDER_DELAY: 250,
    PAYMENT_TEST_PROVIDER_FAILURE_RATE: 0,
    CARD_PROVIDER_ENABLED: false,
    CRYPTO_PROVIDER_ENABLED: false,
    CRYPTO_CONFIRMATIONS: 12,
    CRYPTO_POLL_INTERVAL: 5_000,
    ...overrides,
  }
}

export interface PaymentStackOptions {
  dialect: Dialect
  /** The bus the payment service's relay publishes on. */
  paymentBus: EventBus
  /** The control plane's bus: its relay and, unless `consumerBus` is given, the consumer. */
  controlBus: EventBus
  consumerBus?: EventBus
  /** Start the payment consumer (default true); false: the test starts it (`startConsumer`). */
  consumer?: boolean
  /** Real node agents and the workflow worker (default false). */
  lifecycle?: boolean
  failureRate?: number
  /** When a test payment settles (default 250 ms). */
  providerDelayMs?: number
  logger?: Logger
}

export interface PaymentStack {
  clock: TestClock
  cp: TestDatabase
  payments: TestDatabase
  db: Db
  paymentsDb: Db
  chains: ChainSource
  service: RunningPaymentService
  client: PaymentClient
  api: AuthApi
  userId: string
  key: string
  relays: { controlPlane: OutboxRelay; payments: OutboxRelay }
  evaluator: HealthEvaluator
  lifecycle: LifecycleSetting | undefined
  worker: WorkflowWorker | undefined
  consumer: BusSubscription | undefined
  startConsumer(): Promise<BusSubscription>
  stopConsumer(): Promise<void>
  stop(): Promise<void>
}

export async function startPaymentStack(options: PaymentStackOptions): Promise<PaymentStack> {
  const logger = options.logger ?? createLogger({ level: 'silent' })
  const clock = sharedClock()
  const now = clock.now
  const closers: Array<() => Promise<unknown>> = []
  const stop = async () => {
    const failures: unknown[] = []
    while (closers.length > 0) await (closers.pop() as () => Promise<unknown>)().catch((err: unknown) => failures.push(err))
    if (failures.length > 0) throw new AggregateError(failures, 'stopping the payment stack failed')
  }
  try {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-journey-'))
    closers.push(async () => fs.rmSync(dataDir, { recursive: true, force: true }))
    const cp = await createTestDatabase(options.dialect)
    closers.push(() => cp.destroy())
    const payments = await createTestDatabase(options.dialect, { database: 'payments' })
    closers.push(() => payments.destroy())

    // Relays, as daemons/runtime.ts startRelay runs them (a short poll: rows of "other processes").
    const relays = {
      payments: new OutboxRelay({ db: payments.db, bus: options.paymentBus, logger, now, pollIntervalMs: 100 }),
      controlPlane: new OutboxRelay({ db: cp.db, bus: options.controlBus, logger, now, pollIntervalMs: 100 }),
    }
    relays.payments.start()
    relays.controlPlane.start()
    closers.push(() => relays.payments.stop(), () => relays.controlPlane.stop())

    // The payment service daemon with the development mTLS set in its data dir.
    const pki = ensurePaymentDevCertificates(paymentsCaDir(dataDir))
    const service = await startPaymentService(paymentServiceSettings(dataDir, { PAYMENT_TEST_PROVIDER_FAILURE_RATE: options.failureRate ?? 0, PAYMENT_TEST_PROVIDER_DELAY: options.providerDelayMs ?? 250 }), {
      db: payments.db,
      bus: options.paymentBus,
      logger,
      now,
    })
    closers.push(() => service.stop())
    const clientFiles = pki.clients[0] as (typeof pki.clients)[number]
    const client = new PaymentClient({
      target: service.grpcTarget,
      ca: fs.readFileSync(pki.caFile),
      cert: fs.readFileSync(clientFiles.certFile),
      key: fs.readFileSync(clientFiles.keyFile),
      timeoutMs: 5_000,
    })
    closers.push(async () => client.close())

    let lifecycle: LifecycleSetting | undefined
    let worker: WorkflowWorker | undefined
    let chains: ChainSource
    if (options.lifecycle) {
      const setting = await lifecycleSetting(cp.db, { logger, now })
      lifecycle = setting
      closers.push(() => setting.gateway.stop())
      closers.push(async () => {
        for (const host of fs.readdirSync(setting.root)) await setting.provider.destroyHost(host)
        fs.rmSync(setting.root, { recursive: true, force: true })
        fs.rmSync(setting.store, { recursive: true, force: true })
      })
      const started = startLifecycleWorker(cp.db, setting.deps)
      worker = started
      closers.push(() => started.stop())
      chains = setting.deps.chains
    } else {
      chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    }

    const evaluator = await startHealthEvaluator(
      // Intervals the test never reaches: passes run on `tick()` after the clock moved.
      {
        PENDING_SUBSCRIPTION_TTL: 30 * 60_000,
        SUBSCRIPTION_GRACE_PERIOD: GRACE_PERIOD_MS,
        SUBSCRIPTION_CLEANUP_INTERVAL: 6 * HOUR_MS,
        HEALTH_EVALUATION_INTERVAL: 6 * HOUR_MS,
        HEARTBEAT_TIMEOUT: 60_000,
        MIGRATION_GRACE: 60_000,
        MIGRATIONS_PER_CYCLE: 10,
        MIGRATION_COOLDOWN: HOUR_MS,
        MAINTENANCE_RECOVERY_INTERVAL: 6 * HOUR_MS,
        MAINTENANCE_RECOVERY_AFTER: HOUR_MS,
        INCIDENT_RESOLUTION_DEBOUNCE: 3,
        INCIDENT_FLAP_THRESHOLD: 3,
        INCIDENT_FLAP_WINDOW: 15 * 60_000,
        INCIDENT_FLAP_QUIET: 15 * 60_000,
        INCIDENT_ESCALATE_AFTER: HOUR_MS,
        IDEMPOTENCY_KEY_TTL,
        UPTIME_ROLLUP_INTERVAL: 6 * HOUR_MS,
        UPTIME_ROLLUP_BATCH_SIZE: 500,
        UPTIME_RETENTION: 90 * DAY_MS,
      },
      { db: cp.db, bus: options.controlBus, logger, now, chains },
    )
    closers.push(() => evaluator.stop())

    const resources = new Resources()
    closers.push(() => resources.cleanup())
    const api = await startAuthApi(resources, cp.db, { payments: client, clock })
    const user = await newUser(cp.db)
    const { key } = await newKey(cp.db, user.id, { scopes: ['*'] })

    const consumerBus = options.consumerBus ?? options.controlBus
    const stack: PaymentStack = {
      clock,
      cp,
      payments,
      db: cp.db,
      paymentsDb: payments.db,
      chains,
      service,
      client,
      api,
      userId: user.id,
      key,
      relays,
      evaluator,
      lifecycle,
      worker,
      consumer: undefined,
      async startConsumer() {
        stack.consumer = await startPaymentActivation({ IDEMPOTENCY_KEY_TTL, PAYMENT_CONSUMER_CONCURRENCY }, { bus: consumerBus, db: cp.db, logger, chains, now, payments: client })
        return stack.consumer
      },
      async stopConsumer() {
        const consumer = stack.consumer
        stack.consumer = undefined
        await consumer?.close()
      },
      stop,
    }
    // Closed before the workers and databases (pushed last, so it runs first).
    closers.push(() => stack.stopConsumer())
    if (options.consumer ?? true) await stack.startConsumer()
    return stack
  } catch (err) {
    await stop().catch(() => undefined)
    throw err
  }
}

/** Rows of `table` matching `where`. */
export async function count(db: Db, table: string, where: Record<string, unknown> = {}): Promise<number> {
  const row = (await db(table).where(where).count({ n: '*' }).first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}

export const PAY_ITEM = { chain_profile_id: 'devnet', node_type: 'full', duration: '1w' } as const

export function payBody(subscriptionIds: string[], idempotencyKey: string) {
  return {
    items: subscriptionIds.map(() => ({ ...PAY_ITEM })),
    subscription_ids: subscriptionIds,
    method: 'card',
    idempotency_key: idempotencyKey,
    return_url: 'https://app.example.com/paid',
    cancel_url: 'https://app.example.com/canceled',
  }
}
