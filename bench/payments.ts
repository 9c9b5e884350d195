/**
 * Payment completion -> provisioning workflow started, with NATS in the path (issue 6,
 * "Benchmark"): a payment moves to `completed` in the payment service's database (payment row,
 * audit event and outbox row in one transaction), the payment service's relay publishes
 * `payment.completed` on JetStream, and the control plane's consumer activates the linked
 * subscription, creates its node and starts its provision workflow in one transaction, then
 * acks. Measured from the completion commit to the consumer's commit of the activation.
 *
 * Baseline, same run and server: a bare JetStream round trip with nats.js, publish (awaiting the
 * PubAck) -> pull consumer -> handler, with no database on either side.
 *
 * - latency: one payment at a time; p50 and p99; the figure is baseline p50 / our p50.
 * - throughput: a burst of payments completed back to back; payments/s against round trips/s
 *   of a burst of bare messages.
 */
import crypto from 'node:crypto'
import { connect } from 'nats'
import { createLogger } from '../src/log.js'
import { staticChainSource } from '../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../src/config/chains.js'
import { connectNatsBus } from '../src/events/nats-bus.js'
import { runConsumer } from '../src/events/consumer.js'
import { OutboxRelay } from '../src/events/relay.js'
import { completePayment } from '../src/payments/store.js'
import { paymentConsumerOptions } from '../src/subscriptions/activation.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'
import { bareJetStream, percentile } from './jetstream-baseline.js'
import { BurstTrace } from './payments-trace.js'
import { insertPendingPayment } from './pending-payment.js'

export const benchPayments: Bench = async (ctx) => {
  const latencyRuns = Math.max(30, Math.round(200 * ctx.scale))
  const burst = Math.max(50, Math.round(300 * ctx.scale))
  const logger = createLogger({ level: 'silent' })
  const run = crypto.randomBytes(4).toString('hex')
  const catalogue = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
  const figures: BenchFigure[] = []

  // Baseline: bare JetStream publish -> pull consumer round trips on the EVENTS stream.
  const bare = await bareJetStream(ctx.natsUrl, latencyRuns, burst, 'bench-payments')
  const bareRate = bare.rate
  const nc = await connect({ servers: ctx.natsUrl, name: 'bench-payments-admin' })
  const jsm = await nc.jetstreamManager()
  ctx.log(`bare JetStream round trip: p50 ${bare.p50.toFixed(2)} ms, p99 ${bare.p99.toFixed(2)} ms, burst ${bareRate.toFixed(0)}/s`)

  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const controlPlane = await benchDatabase(dialect, ctx.postgresUrl, 'control-plane')
      const payments = await benchDatabase(dialect, ctx.postgresUrl, 'payments')
      // Separate connections, as separate processes would have.
      const paymentBus = await connectNatsBus({ url: ctx.natsUrl, logger, name: `bench-payment-service-${dialect}` })
      const consumerBus = await connectNatsBus({ url: ctx.natsUrl, logger, name: `bench-control-plane-${dialect}` })
      await jsm.streams.purge('PAYMENTS')
      const trace = new BurstTrace()
      trace.timeStatements('payment service', payments.db)
      trace.timeStatements('control plane', controlPlane.db)
      if (dialect === 'postgres') {
        trace.watchPostgres('payment service', payments.db)
        trace.watchPostgres('control plane', controlPlane.db)
      }
      const relay = new OutboxRelay({ db: payments.db, bus: trace.publishing(paymentBus), logger, pollIntervalMs: 500, metrics: { published: () => trace.relayCycle() } })
      const processedAt = new Map<string, number>()
      const waiters = new Map<string, () => void>()
      const options = paymentConsumerOptions({
        bus: trace.consuming(consumerBus),
        db: controlPlane.db,
        logger,
        chains: catalogue,
        idempotencyTtlMs: 86_400_000,
        concurrency: 8,
        onOutcome: (outcome, info) => {
          const paymentId = trace.paymentFor(info.messageId)
          if (outcome !== 'processed' || !paymentId) return
          const at = performance.now()
          processedAt.set(paymentId, at)
          trace.stage(paymentId).processed ??= at
          waiters.get(paymentId)?.()
        },
      })
      const subscription = await runConsumer({ ...options, durable: `bench-payments-${dialect}-${run}` })
      relay.start()
      try {
        /** A user with a pending subscription and a pending payment linked to it. */
        const prepare = async (): Promise<string> =>
          (await insertPendingPayment(controlPlane.db, payments.db, catalogue.current(), { provider: 'test', amountMinor: 1500 })).paymentId
        /** Completes the payment; resolves with the time of its commit. */
        const complete = async (paymentId: string): Promise<number> => {
          await payments.db.transaction((trx) => completePayment(trx, paymentId, { actor: 'bench' }, new Date()))
          const t0 = performance.now()
          trace.stage(paymentId).committed = t0
          return t0
        }
        // Payments are known by id: the relay's side of the trace maps each message id to its payment.
        const activated = (paymentId: string): Promise<void> =>
          processedAt.has(paymentId) ? Promise.resolve() : new Promise((resolve) => waiters.set(paymentId, () => resolve()))

        for (let i = 0; i < 5; i++) {
          const paymentId = await prepare()
          await complete(paymentId)
          await activated(paymentId)
        }
        const latencies: number[] = []
        for (let i = 0; i < latencyRuns; i++) {
          const paymentId = await prepare()
          const t0 = await complete(paymentId)
          await activated(paymentId)
          latencies.push((processedAt.get(paymentId) as number) - t0)
        }
        latencies.sort((a, b) => a - b)

        const ids: string[] = []
        for (let i = 0; i < burst; i++) ids.push(await prepare())
        await trace.start()
        const started = performance.now()
        await Promise.all(ids.map((id) => complete(id).then(() => activated(id))))
        const rate = burst / ((performance.now() - started) / 1000)
        for (const line of await trace.report()) ctx.log(`${dialect} burst: ${line}`)

        const runs = Number(((await controlPlane.db('workflow_runs').where({ workflow_name: 'provision' }).count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n)
        const expected = 5 + latencyRuns + burst
        if (runs !== expected) throw new Error(`${runs} provision runs started, expected ${expected}`)
        const p50 = percentile(latencies, 0.5)
        const p99 = percentile(latencies, 0.99)
        const bareP50 = bare.p50
        ctx.log(`${dialect}: completion -> provisioning started p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms; burst of ${burst}: ${rate.toFixed(0)} payments/s`)
        figures.push(
          figure({
            name: `payment completed -> provision workflow started, one at a time (${dialect}); p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms (bare p50 ${bareP50.toFixed(2)} ms, p99 ${bare.p99.toFixed(2)} ms)`,
            baseline: 'bare JetStream publish -> consume round trip, p50 (ratio = bare p50 / ours)',
            unit: 'inverse ms',
            value: 1 / p50,
            baselineValue: 1 / bareP50,
            notes: `${latencyRuns} payments; two database transactions and an outbox relay in the path`,
          }),
          figure({
            name: `payment completed -> provision workflow started, burst of ${burst} (${dialect})`,
            baseline: 'bare JetStream round trips, same burst size',
            unit: 'payments/s',
            value: rate,
            baselineValue: bareRate,
            ...(dialect === 'postgres' ? { aim: '>= 1,000 payments/s (issue 21)' } : {}),
            notes: 'consumer concurrency 8; relay wakes on commit; the log breaks the burst down',
          }),
        )
      } finally {
        await subscription.close()
        await relay.stop()
        await paymentBus.close()
        await consumerBus.close()
        await controlPlane.drop()
        await payments.drop()
      }
    }
  } finally {
    await nc.close()
  }
  return figures
}
