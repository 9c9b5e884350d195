/**
 * The purchase journey split across processes' buses: the payment service's relay publishes on
 * one NATS connection, the control plane's consumer reads on another, through a real nats-server
 * (Postgres). Exactly one active subscription, one node and one provision run although the
 * completion is delivered again and again and a stale failure arrives after it; a consumer that
 * dies between its commit and its ack; NATS down while a payment completes. The provision
 * workflows are only started here (no worker): the in-process journey runs them.
 */
import { connect, type JetStreamManager, type NatsConnection } from 'nats'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { BusMessage, EventBus } from '../../src/events/bus.js'
import { createEventHandler, type ConsumerOutcome } from '../../src/events/consumer.js'
import { connectNatsBus } from '../../src/events/nats-bus.js'
import { countUnpublished, enqueueEvent } from '../../src/events/outbox.js'
import { createLogger } from '../../src/log.js'
import { PROVISION_WORKFLOW } from '../../src/provisioning/provision.js'
import { PAYMENT_CONSUMER_DURABLE, paymentConsumerOptions, startPaymentConsumer } from '../../src/subscriptions/activation.js'
import { fromJson } from '../../src/db/dialect.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { waitFor } from '../helpers/ports.js'
import { count, IDEMPOTENCY_KEY_TTL, payBody, PAY_ITEM, startPaymentStack, type PaymentStack } from '../helpers/payment-stack.js'

const logger = createLogger({ level: 'silent' })
/** Short, so a lost ack is redelivered quickly. */
const ACK_WAIT_MS = 1_500

interface Seen {
  outcome: ConsumerOutcome
  subject: string
  messageId: string | undefined
  deliveryCount: number
}

describe('the purchase journey over a real nats-server (postgres)', () => {
  let nats: NatsServer
  let buses: EventBus[]
  let stack: PaymentStack | undefined
  let raw: NatsConnection | undefined

  beforeEach(async () => {
    // A fresh server per case: durable consumer state and stream contents do not leak between cases.
    nats = await startNats()
    buses = []
    stack = undefined
    raw = undefined
  })
  afterEach(async () => {
    await stack?.stop()
    for (const bus of buses.reverse()) await bus.close()
    await raw?.close()
    await nats.destroy()
  })

  async function bus(name: string): Promise<EventBus> {
    const b = await connectNatsBus({ url: nats.url, logger, name, ackWaitMs: ACK_WAIT_MS, reconnectTimeWaitMs: 200 })
    buses.push(b)
    return b
  }

  async function jsm(): Promise<JetStreamManager> {
    raw ??= await connect({ servers: nats.url })
    return raw.jetstreamManager()
  }

  async function start(options: { consumer: boolean }): Promise<PaymentStack> {
    const paymentBus = await bus('payment-service')
    const consumerBus = await bus('orchestrator')
    stack = await startPaymentStack({ dialect: 'postgres', paymentBus, controlBus: consumerBus, consumer: options.consumer })
    return stack
  }

  const call = (s: PaymentStack, method: string, url: string, body?: unknown) => s.api.call(method, url, { bearer: s.key, ...(body !== undefined ? { body } : {}) })

  async function subscribeAndPay(s: PaymentStack, key: string): Promise<{ subscriptionId: string; paymentId: string }> {
    const created = await call(s, 'POST', '/api/v1/subscriptions', { ...PAY_ITEM })
    expect(created.status).toBe(201)
    const subscriptionId = (created.body as { id: string }).id
    const paid = await call(s, 'POST', '/api/v1/payments', payBody([subscriptionId], key))
    expect(paid.status, JSON.stringify(paid.body)).toBe(201)
    return { subscriptionId, paymentId: (paid.body as { id: string }).id }
  }

  const status = async (s: PaymentStack, id: string) => ((await s.db('subscriptions').where({ id }).first('status')) as { status: string }).status

  /** One active subscription with one node in provisioning and exactly one provision run, nothing else. */
  async function expectActivatedOnce(s: PaymentStack, subscriptionId: string, paymentId: string): Promise<void> {
    const subs = (await s.db('subscriptions').select('id', 'status', 'payment_id')) as Array<Record<string, unknown>>
    expect(subs).toEqual([{ id: subscriptionId, status: 'active', payment_id: paymentId }])
    const nodes = (await s.db('nodes').select('id', 'subscription_id', 'state')) as Array<{ id: string; subscription_id: string; state: string }>
    expect(nodes).toHaveLength(1)
    expect(nodes[0]).toMatchObject({ subscription_id: subscriptionId, state: 'provisioning' })
    const runs = (await s.db('workflow_runs').select('workflow_name', 'workflow_key')) as Array<Record<string, unknown>>
    expect(runs).toEqual([{ workflow_name: PROVISION_WORKFLOW, workflow_key: nodes[0]?.id }])
    expect(await s.db('payment_requests').where({ id: paymentId }).first('status')).toEqual({ status: 'completed' })
    expect(await s.paymentsDb('payments').where({ id: paymentId }).first('status')).toEqual({ status: 'completed' })
  }

  async function consumerSettled(): Promise<void> {
    const manager = await jsm()
    await waitFor(async () => {
      const info = await manager.consumers.info('PAYMENTS', PAYMENT_CONSUMER_DURABLE)
      return info.num_pending === 0 && info.num_ack_pending === 0
    }, 'the payment consumer to have acked everything', 20_000, 100)
  }

  function recordingConsumer(s: PaymentStack, busForConsumer: EventBus, seen: Seen[]) {
    return startPaymentConsumer({
      bus: busForConsumer,
      db: s.db,
      logger,
      chains: s.chains,
      idempotencyTtlMs: IDEMPOTENCY_KEY_TTL,
      now: s.clock.now,
      onOutcome: (outcome, info) => seen.push({ outcome, subject: info.subject, messageId: info.messageId, deliveryCount: info.deliveryCount }),
    })
  }

  it('activates once: the completion republished under its id and under a new one, and a stale failure after it', { timeout: 60_000 }, async () => {
    const s = await start({ consumer: false })
    const seen: Seen[] = []
    const consumer = await recordingConsumer(s, buses[1] as EventBus, seen)
    try {
      const { subscriptionId, paymentId } = await subscribeAndPay(s, 'nats-a')
      await waitFor(async () => (await status(s, subscriptionId)) === 'active', 'activation over NATS')
      await waitFor(async () => (await countUnpublished(s.paymentsDb)) === 0, 'the payments outbox published')
      const original = (await s.paymentsDb('outbox').where({ subject: 'payment.completed' }).first()) as Record<string, unknown>
      const payload = fromJson<Record<string, unknown>>(original.payload)
      expect(payload).toMatchObject({ payment_id: paymentId, status: 'completed', subscription_ids: [subscriptionId] })

      // 2nd: the same row published again (a relay that died before marking it): same message id.
      await s.paymentsDb('outbox').where({ id: original.id }).update({ published_at: null, claimed_by: null, claimed_until: null })
      // 3rd: a copy under a new message id; then a payment.failed for the same payment, late.
      await enqueueEvent(s.paymentsDb, { subject: 'payment.completed', payload })
      await enqueueEvent(s.paymentsDb, { subject: 'payment.failed', payload: { ...payload, status: 'failed', failure_reason: 'stale failure (test)', completed_at: null } })
      await waitFor(async () => (await countUnpublished(s.paymentsDb)) === 0, 'the republished rows published')
      await waitFor(async () => seen.length >= 3, 'the copies consumed')
      await consumerSettled()

      // JetStream stored the same message id once; the consumer ran the other two, changing nothing.
      const stream = await (await jsm()).streams.info('PAYMENTS')
      expect(stream.state.messages).toBe(3)
      expect(seen.map((x) => [x.subject, x.outcome])).toEqual([
        ['payment.completed', 'processed'],
        ['payment.completed', 'processed'],
        ['payment.failed', 'processed'],
      ])
      expect(seen[0]?.messageId).toBe(String(original.message_id))
      expect(new Set(seen.map((x) => x.messageId)).size).toBe(3)
      await expectActivatedOnce(s, subscriptionId, paymentId)
      expect(await count(s.db, 'idempotency_keys', { consumer: PAYMENT_CONSUMER_DURABLE })).toBe(3)
      expect(await countUnpublished(s.db)).toBe(0)
      // The stale failure of a payment that completed tells the user nothing.
      expect(await s.db('notifications').pluck('kind')).toEqual([])
    } finally {
      await consumer.close()
    }
  })

  it('a consumer killed between its commit and its ack: the redelivery is skipped', { timeout: 60_000 }, async () => {
    const s = await start({ consumer: false })
    // The "process" that dies: its own connection, the real handler, but the ack never leaves.
    const doomedBus = await bus('orchestrator-doomed')
    const handle = createEventHandler(paymentConsumerOptions({ bus: doomedBus, db: s.db, logger, chains: s.chains, idempotencyTtlMs: IDEMPOTENCY_KEY_TTL, now: s.clock.now }))
    const doomedOutcomes: ConsumerOutcome[] = []
    const doomed = await doomedBus.subscribe({ durable: PAYMENT_CONSUMER_DURABLE, subject: 'payment.*', ackWaitMs: ACK_WAIT_MS }, async (message: BusMessage) => {
      doomedOutcomes.push(await handle({ ...message, ack: () => undefined, nak: () => undefined, term: () => undefined }))
    })
    const { subscriptionId, paymentId } = await subscribeAndPay(s, 'nats-b')
    await waitFor(async () => doomedOutcomes.length === 1, 'the doomed consumer to handle the completion')
    await doomed.close()
    await doomedBus.close()
    expect(doomedOutcomes).toEqual(['processed'])
    await expectActivatedOnce(s, subscriptionId, paymentId)
    const unacked = await (await jsm()).consumers.info('PAYMENTS', PAYMENT_CONSUMER_DURABLE)
    expect(unacked.num_ack_pending + unacked.num_pending).toBe(1)

    // The real consumer starts, gets the redelivery after the ack wait, and skips it.
    const seen: Seen[] = []
    const consumer = await recordingConsumer(s, buses[1] as EventBus, seen)
    try {
      await waitFor(async () => seen.length === 1, 'the redelivery', 20_000)
      expect(seen[0]).toMatchObject({ subject: 'payment.completed', outcome: 'duplicate' })
      expect(seen[0]?.deliveryCount).toBeGreaterThanOrEqual(2)
      await consumerSettled()
      await expectActivatedOnce(s, subscriptionId, paymentId)
      expect(await count(s.db, 'idempotency_keys', { consumer: PAYMENT_CONSUMER_DURABLE })).toBe(1)
    } finally {
      await consumer.close()
    }
  })

  it('NATS down while a payment completes: the event waits in the outbox and activates once NATS is back', { timeout: 60_000 }, async () => {
    const s = await start({ consumer: true })
    await nats.stop()
    const { subscriptionId, paymentId } = await subscribeAndPay(s, 'nats-c')
    // The test provider completes the payment; the outbox keeps the event.
    await waitFor(async () => ((await s.paymentsDb('payments').where({ id: paymentId }).first('status')) as { status: string }).status === 'completed', 'the payment to complete')
    await waitFor(async () => Number((await s.paymentsDb('outbox').where({ subject: 'payment.completed' }).first('attempts'))?.attempts ?? 0) > 0, 'a failed publish attempt')
    expect(await countUnpublished(s.paymentsDb)).toBeGreaterThan(0)
    expect(await call(s, 'GET', `/api/v1/payments/${paymentId}`)).toMatchObject({ status: 200, body: { status: 'completed' } })
    expect(await status(s, subscriptionId)).toBe('pending_payment')
    expect(await count(s.db, 'nodes')).toBe(0)
    expect(await count(s.db, 'workflow_runs')).toBe(0)

    await nats.start()
    await waitFor(async () => (await status(s, subscriptionId)) === 'active', 'activation after NATS came back', 30_000, 100)
    await waitFor(async () => (await countUnpublished(s.paymentsDb)) === 0, 'the outbox published')
    await consumerSettled()
    await expectActivatedOnce(s, subscriptionId, paymentId)
    expect(await count(s.db, 'idempotency_keys', { consumer: PAYMENT_CONSUMER_DURABLE })).toBe(1)
  })
})
