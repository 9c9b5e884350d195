/**
 * Defence in depth behind the bus permissions: the control plane confirms every
 * payment.completed with the payment service (GetPayment over mutual TLS) before it activates
 * anything. On a real nats-server with TLS and per-service nkeys, a real payment service and
 * both databases: a genuine payment activates; events injected by the permitted publisher (the
 * payment service's own NATS user) that do not match a completed payment activate nothing and
 * raise a payment_unconfirmed incident; while the payment service cannot be reached the event
 * waits (redelivered) and activates once it can.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { EventBus } from '../../../src/events/bus.js'
import type { ConsumerOutcome } from '../../../src/events/consumer.js'
import { encodePayload } from '../../../src/events/envelope.js'
import { openEventBus } from '../../../src/events/open-bus.js'
import { createLogger } from '../../../src/log.js'
import { PaymentClient } from '../../../src/payments/client.js'
import type { PaymentEvent } from '../../../src/payments/events.js'
import type { WirePayment } from '../../../src/payments/grpc.js'
import { startPaymentConsumer } from '../../../src/subscriptions/activation.js'
import { startPaymentActivation } from '../../../daemons/orchestrator.js'
import { DIALECTS } from '../../helpers/db.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { freePort, waitFor } from '../../helpers/ports.js'
import { count, IDEMPOTENCY_KEY_TTL, payBody, PAYMENT_CONSUMER_CONCURRENCY, PAY_ITEM, startPaymentStack, type PaymentStack } from '../../helpers/payment-stack.js'

const logger = createLogger({ level: 'silent' })
type PayItem = { chain_profile_id: string; node_type: string; duration: string }

describe.each(DIALECTS)('payment.completed is confirmed with the payment service (%s)', (dialect) => {
  let nats: NatsServer
  let paymentBus: EventBus
  let controlBus: EventBus
  let stack: PaymentStack

  beforeAll(async () => {
    nats = await startNats({ secure: true })
    try {
      paymentBus = await openEventBus({ settings: nats.envFor('payment-service'), service: 'payment-service', singleProcess: false, logger, name: 'payment-service', nats: { ackWaitMs: 2_000 } })
      controlBus = await openEventBus({ settings: nats.envFor('control-plane'), service: 'control-plane', singleProcess: false, logger, name: 'orchestrator', nats: { ackWaitMs: 2_000 } })
      stack = await startPaymentStack({ dialect, paymentBus, controlBus })
    } catch (err) {
      await paymentBus?.close()
      await controlBus?.close()
      await nats.destroy()
      throw err
    }
  })
  afterAll(async () => {
    await stack?.stop()
    await controlBus?.close()
    await paymentBus?.close()
    await nats?.destroy()
  })

  const call = (method: string, url: string, body?: unknown) => stack.api.call(method, url, { bearer: stack.key, ...(body !== undefined ? { body } : {}) })
  const status = async (id: string) => ((await stack.db('subscriptions').where({ id }).first('status')) as { status: string }).status

  /** A subscription waiting for payment (200: the user's unpaid one for the same item, left by a forgery above). */
  async function pendingSubscription(item: PayItem = PAY_ITEM): Promise<string> {
    const created = await call('POST', '/api/v1/subscriptions', { ...item })
    expect([200, 201]).toContain(created.status)
    return (created.body as { id: string }).id
  }

  async function pay(subscriptionId: string, item: PayItem = PAY_ITEM): Promise<string> {
    const paid = await call('POST', '/api/v1/payments', { ...payBody([subscriptionId], crypto.randomUUID()), items: [{ ...item }] })
    expect(paid.status, JSON.stringify(paid.body)).toBe(201)
    return (paid.body as { id: string }).id
  }

  /** The payment service's own event for a payment, as it published it. */
  async function genuineEvent(paymentId: string): Promise<PaymentEvent> {
    const row = (await stack.paymentsDb('outbox').where('subject', 'payment.completed').select('payload')) as Array<{ payload: unknown }>
    const event = row.map((r) => fromJson<PaymentEvent>(r.payload)).find((e) => e.payment_id === paymentId)
    if (!event) throw new Error(`no payment.completed for ${paymentId} in the payments outbox`)
    return event
  }

  /** Injected by the payment service's NATS user: the bus lets it through, only the confirmation can stop it. */
  async function inject(event: PaymentEvent): Promise<void> {
    await paymentBus.publish({ subject: 'payment.completed', data: encodePayload(event as unknown as Record<string, unknown>), messageId: crypto.randomUUID() })
  }

  async function unconfirmedIncident(paymentId: string): Promise<Record<string, unknown> | undefined> {
    return (await stack.db('incidents').where({ node_id: paymentId, category: 'payment_unconfirmed' }).first()) as Record<string, unknown> | undefined
  }

  it('activates a genuine payment, and refuses forged completions of it (other subscription, other amount) and of an unknown payment', async () => {
    const paidFor = await pendingSubscription()
    const paymentId = await pay(paidFor)
    await waitFor(async () => (await status(paidFor)) === 'active', 'the genuine payment to activate its subscription')
    const genuine = await genuineEvent(paymentId)
    const nodesBefore = await count(stack.db, 'nodes')

    // A forger reuses the real completed payment for another pending subscription, then with another amount.
    const victim = await pendingSubscription()
    await inject({ ...genuine, subscription_ids: [victim] })
    await waitFor(async () => (await unconfirmedIncident(paymentId)) !== undefined, 'an incident for the forged subscription list')
    await inject({ ...genuine, amount_minor: genuine.amount_minor + 1 })
    await waitFor(async () => Number((await unconfirmedIncident(paymentId))?.occurrence_count) === 2, 'the second forgery counted on the same incident')
    // A payment the payment service never made, with line items for the fallback path.
    const invented = crypto.randomUUID()
    await inject({ ...genuine, payment_id: invented, subscription_ids: [] })
    await waitFor(async () => (await unconfirmedIncident(invented)) !== undefined, 'an incident for the invented payment')

    expect(await status(victim)).toBe('pending_payment')
    expect(await count(stack.db, 'nodes')).toBe(nodesBefore)
    expect(await count(stack.db, 'subscriptions', { status: 'active' })).toBe(1)
    expect(await count(stack.db, 'subscriptions', { payment_id: invented })).toBe(0)
    const incident = (await unconfirmedIncident(paymentId)) as Record<string, unknown>
    expect(incident).toMatchObject({ severity: 'critical', status: 'open', user_id: null })
    expect(fromJson<Record<string, unknown>>(incident.metadata)).toMatchObject({ payment_id: paymentId, reason: 'the event names other subscriptions than the payment' })
    expect(String(incident.description)).toMatch(/no subscription was activated/)
    expect(fromJson<Record<string, unknown>>((await unconfirmedIncident(invented))?.metadata)).toMatchObject({ reason: 'the payment service has no such payment for this customer' })
    // Operators see it; the customer whose payment was reused is not told about an incident.
    expect(await count(stack.db, 'notifications', { user_id: stack.userId, kind: 'incident_opened' })).toBe(0)
  })

  it('keeps a completion waiting while the payment service is unreachable, then activates it once', async () => {
    await stack.stopConsumer()
    // Any well-formed credentials: nothing listens on the port.
    const files = nats.envFor('control-plane')
    const pem = (file: string | undefined) => fs.readFileSync(file as string)
    const unreachable = new PaymentClient({ target: `127.0.0.1:${await freePort()}`, ca: pem(files.NATS_CA_FILE), cert: pem(files.NATS_CERT_FILE), key: pem(files.NATS_KEY_FILE), timeoutMs: 300 })
    const outcomes: ConsumerOutcome[] = []
    const blind = await startPaymentConsumer({
      bus: controlBus,
      db: stack.db,
      logger,
      chains: stack.chains,
      idempotencyTtlMs: IDEMPOTENCY_KEY_TTL,
      now: stack.clock.now,
      payments: unreachable,
      retryDelayMs: () => 50,
      onOutcome: (outcome) => outcomes.push(outcome),
    })
    let subscriptionId: string
    try {
      subscriptionId = await pendingSubscription()
      await pay(subscriptionId)
      await waitFor(async () => outcomes.filter((o) => o === 'failed').length >= 2, 'the completion to be redelivered while unconfirmed')
      expect(outcomes.every((o) => o === 'failed')).toBe(true)
      expect(await status(subscriptionId)).toBe('pending_payment')
    } finally {
      await blind.close()
      unreachable.close()
    }
    await stack.startConsumer()
    await waitFor(async () => (await status(subscriptionId)) === 'active', 'the redelivered completion to activate once confirmed')
    expect(await count(stack.db, 'nodes', { subscription_id: subscriptionId })).toBe(1)
  })

  it('activates other payments while one waits on its confirmation (the orchestrator handles payment events side by side)', async () => {
    expect(PAYMENT_CONSUMER_CONCURRENCY).toBeGreaterThan(1)
    await stack.stopConsumer()
    // The payment service answers this one payment's GetPayment only when the test lets it.
    let heldPaymentId: string | undefined
    let release: () => void = () => undefined
    const released = new Promise<void>((resolve) => (release = resolve))
    let heldAsked = false
    const slowForOne = {
      async getPayment(paymentId: string, customerId: string | null): Promise<WirePayment> {
        if (paymentId === heldPaymentId) {
          heldAsked = true
          await released
        }
        return stack.client.getPayment(paymentId, customerId)
      },
    }
    const consumer = await startPaymentActivation(
      { IDEMPOTENCY_KEY_TTL, PAYMENT_CONSUMER_CONCURRENCY },
      { bus: controlBus, db: stack.db, logger, chains: stack.chains, now: stack.clock.now, payments: slowForOne },
    )
    try {
      // Another duration: an equal pending subscription would be the same one (rule 1).
      const otherItem = { ...PAY_ITEM, duration: '1m' }
      const first = await pendingSubscription()
      const second = await pendingSubscription(otherItem)
      heldPaymentId = await pay(first)
      await waitFor(async () => heldAsked, 'the first completion to ask for its confirmation')
      await pay(second, otherItem)
      await waitFor(async () => (await status(second)) === 'active', 'the second payment to activate while the first waits')
      expect(await status(first)).toBe('pending_payment')
      release()
      await waitFor(async () => (await status(first)) === 'active', 'the first payment to activate once confirmed')
      expect(await count(stack.db, 'nodes', { subscription_id: first })).toBe(1)
      expect(await count(stack.db, 'nodes', { subscription_id: second })).toBe(1)
    } finally {
      release()
      await consumer.close()
      await stack.startConsumer()
    }
  })
})
