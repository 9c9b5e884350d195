/**
 * The card provider end to end (payment service spec, "Provider adapter operations": card):
 * PaymentService with the card provider, the official SDK talking to a local fake of the
 * processor over HTTP, and POST /webhooks/card-provider served over real HTTP. Both databases.
 */
import crypto from 'node:crypto'
import { afterEach, describe, expect, it } from 'vitest'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { UnavailableError } from '../../../src/errors.js'
import { createApiApp } from '../../../src/http/app.js'
import { startHttpServer } from '../../../src/http/server.js'
import { createLogger } from '../../../src/log.js'
import { createMetrics } from '../../../src/metrics.js'
import { PaymentPreconditionError } from '../../../src/payments/errors.js'
import { parsePricingConfig } from '../../../src/payments/pricing.js'
import { CardProvider } from '../../../src/payments/providers/card.js'
import { ProviderRegistry } from '../../../src/payments/providers/registry.js'
import { PaymentService } from '../../../src/payments/service.js'
import { findPayment, paymentEvents } from '../../../src/payments/store.js'
import { CARD_WEBHOOK_PATH, cardWebhookRoute } from '../../../src/payments/webhook-route.js'
import { createTestDatabase, describeEachDialectConcurrently } from '../../helpers/db.js'
import { FakeCardProcessor, signedDelivery, signHeader, type FakeSession, type WebhookDelivery } from '../../helpers/fake-card-processor.js'
import { LogCapture, Resources } from '../http/harness.js'

const SECRET_KEY = `sk_test_${crypto.randomBytes(12).toString('hex')}`
const WEBHOOK_SECRET = `whsec_${crypto.randomBytes(24).toString('base64')}`

const pricing = parsePricingConfig({ currency: 'USD', pricing: { devnet: { full: { '1w': 1500, '1m': 5000 } } }, crypto: { supported_currencies: [] } })

class Clock {
  private at = Math.floor(Date.now() / 1000) * 1000
  readonly now = (): Date => new Date(this.at)
  advance(ms: number): void {
    this.at += ms
  }
  get seconds(): number {
    return Math.floor(this.at / 1000)
  }
}

describeEachDialectConcurrently('card provider on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function setup(options: { bodyLimitBytes?: number; maxNetworkRetries?: number } = {}) {
    const t = await createTestDatabase(dialect, { database: 'payments' })
    resources.add(() => t.destroy())
    const clock = new Clock()
    const processor = await FakeCardProcessor.start({ secretKey: SECRET_KEY, now: clock.now })
    resources.add(() => processor.close())
    const logs = new LogCapture()
    const logger = createLogger({ destination: logs, level: 'debug' })
    const card = new CardProvider({
      db: t.db,
      logger,
      now: clock.now,
      secretKey: SECRET_KEY,
      webhookSecret: WEBHOOK_SECRET,
      apiUrl: processor.url,
      ...(options.maxNetworkRetries !== undefined ? { maxNetworkRetries: options.maxNetworkRetries } : {}),
    })
    const service = new PaymentService({ db: t.db, logger, pricing: () => pricing, providers: new ProviderRegistry([card]), now: clock.now })
    const app = createApiApp({
      db: t.db,
      logger,
      metrics: createMetrics('payment-service'),
      routes: [cardWebhookRoute({ provider: card, bodyLimitBytes: options.bodyLimitBytes ?? 64 * 1024 })],
    })
    const server = await startHttpServer(app, { host: '127.0.0.1', port: 0, drainTimeoutMs: 2_000 })
    resources.add(() => server.close())

    const customerId = crypto.randomUUID()
    const initiate = (idempotencyKey = 'order-1', items = [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w' }]) =>
      service.initiatePayment(
        {
          customer: { id: customerId, email: 'ada@example.com' },
          items,
          method: 'card',
          idempotency_key: idempotencyKey,
          return_url: 'https://app.example.test/payments/done',
          cancel_url: 'https://app.example.test/payments/canceled',
        },
        { actor: `user:${customerId}`, requestId: 'grpc-req-1', ip: '10.0.0.7' },
      )
    /** A payment with its open checkout session at the processor. */
    const opened = async () => {
      const { payment } = await initiate()
      return { payment, session: processor.session(payment.providerReference as string) }
    }
    const sign = (session: FakeSession, type: string, eventId?: string) =>
      signedDelivery(session, type, { secret: WEBHOOK_SECRET, timestamp: clock.seconds, ...(eventId ? { eventId } : {}) })
    const deliver = async (delivery: Pick<WebhookDelivery, 'payload'> & { signature?: string | undefined }, requestId = 'whk-req-1') => {
      const headers: Record<string, string> = { 'Content-Type': 'application/json', 'X-Request-Id': requestId }
      if (delivery.signature !== undefined) headers['Provider-Signature'] = delivery.signature
      const res = await fetch(`${server.url}${CARD_WEBHOOK_PATH}`, { method: 'POST', headers, body: delivery.payload })
      const text = await res.text()
      return { status: res.status, body: (res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text) as Record<string, unknown> }
    }
    return { db: t.db, url: server.url, clock, processor, logs, card, service, initiate, opened, sign, deliver }
  }

  /** The subjects of the outbox rows of one payment, oldest first. */
  async function outboxOf(db: Db, paymentId: string): Promise<string[]> {
    const rows = (await db('outbox').orderBy('created_at').select('subject', 'payload')) as Array<{ subject: string; payload: unknown }>
    return rows.filter((row) => fromJson<{ payment_id: string }>(row.payload).payment_id === paymentId).map((row) => row.subject)
  }

  /** Everything a webhook can write, to show that a refused one wrote nothing. */
  async function written(db: Db, paymentId: string) {
    const payment = await findPayment(db, paymentId)
    const outbox = (await db('outbox').orderBy('created_at').select('subject', 'payload')) as Array<{ subject: string; payload: unknown }>
    return {
      status: payment?.status,
      version: payment?.version,
      audit: (await paymentEvents(db, paymentId)).map((e) => e.eventType),
      outbox: outbox.map((row) => ({ subject: row.subject, payment_id: fromJson<{ payment_id: string }>(row.payload).payment_id })),
      providerEvents: ((await db('provider_events').select('event_id', 'event_type', 'payment_id')) as Array<Record<string, unknown>>).length,
    }
  }

  it('InitiatePayment creates a hosted checkout session and stores its reference and url', async () => {
    const { db, clock, processor, initiate } = await setup()
    const { payment, created } = await initiate('order-1', [
      { chain_profile_id: 'devnet', node_type: 'full', duration: '1w' },
      { chain_profile_id: 'devnet', node_type: 'full', duration: '1m' },
    ])
    expect(created).toBe(true)
    expect(payment).toMatchObject({ status: 'pending', provider: 'card', method: 'card', amountMinor: 6500, currency: 'USD' })
    expect(payment.providerReference).toMatch(/^cs_test_/)
    const session = processor.session(payment.providerReference as string)
    expect(payment.checkoutUrl).toBe(session.url)
    expect(session).toMatchObject({ status: 'open', mode: 'payment', amount_total: 6500, currency: 'usd', client_reference_id: payment.id, metadata: { payment_id: payment.id } })
    expect(session).toMatchObject({ success_url: 'https://app.example.test/payments/done', cancel_url: 'https://app.example.test/payments/canceled' })
    // At least 30 minutes out at the processor, though the payment itself expires in 30.
    expect(session.expires_at).toBe(clock.seconds + 31 * 60)

    const create = processor.requests.find((r) => r.method === 'POST' && r.path === '/v1/checkout/sessions')
    expect(create).toMatchObject({ authorized: true, idempotencyKey: `payment:${payment.id}` })
    expect(create?.form.line_items).toEqual([
      { price_data: { currency: 'usd', unit_amount: '1500', product_data: { name: 'devnet full node, 1w' } }, quantity: '1' },
      { price_data: { currency: 'usd', unit_amount: '5000', product_data: { name: 'devnet full node, 1m' } }, quantity: '1' },
    ])
    const stored = await findPayment(db, payment.id)
    expect(stored).toMatchObject({ providerReference: session.id, checkoutUrl: session.url })
    expect(await paymentEvents(db, payment.id)).toEqual([
      expect.objectContaining({ eventType: 'payment.created', requestId: 'grpc-req-1', details: expect.objectContaining({ provider: 'card', status: 'pending' }) }),
    ])
  })

  it('a retried InitiatePayment gets the same payment, and the processor one session', async () => {
    const { processor, card, initiate } = await setup()
    const first = await initiate('order-retry')
    const again = await initiate('order-retry')
    expect(again.created).toBe(false)
    expect(again.payment.id).toBe(first.payment.id)
    expect(again.payment.checkoutUrl).toBe(first.payment.checkoutUrl)
    expect(processor.sessions.size).toBe(1)
    // The provider asked again for the same payment (a crash between the call and the commit) gets the same session.
    const repeated = await card.initiatePayment(first.payment)
    expect(repeated).toEqual({ providerReference: first.payment.providerReference, checkoutUrl: first.payment.checkoutUrl })
    expect(processor.sessions.size).toBe(1)
  })

  it('checkout.session.completed (paid) completes the payment and writes payment.completed', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const res = await deliver(sign(processor.complete(session.id, 'paid'), 'checkout.session.completed'))
    expect(res).toEqual({ status: 200, body: { status: 'ok', outcome: 'completed' } })
    const after = await findPayment(db, payment.id)
    expect(after).toMatchObject({ status: 'completed' })
    expect(after?.completedAt).toBeInstanceOf(Date)
    expect(await written(db, payment.id)).toMatchObject({
      audit: ['payment.created', 'payment.processing', 'payment.completed'],
      outbox: [{ subject: 'payment.completed', payment_id: payment.id }],
      providerEvents: 1,
    })
    const completed = (await paymentEvents(db, payment.id)).at(-1)
    expect(completed).toMatchObject({ actor: 'provider:card', requestId: 'whk-req-1', details: expect.objectContaining({ from: 'processing', to: 'completed', session_id: session.id }) })
    expect(completed?.ip).toContain('127.0.0.1')
  })

  it('a retry of a payment whose first call never attached its session (still setting up, or died) sets it up: a checkout url, one session', async () => {
    const { db, processor, initiate } = await setup()
    const first = await initiate('order-unattached')
    // As if the first call had committed the pending row and died before attaching the session.
    await db('payments').where({ id: first.payment.id }).update({ provider_reference: null, checkout_url: null })
    const again = await initiate('order-unattached')
    expect(again).toMatchObject({ created: false, payment: { id: first.payment.id, status: 'pending', providerReference: first.payment.providerReference, checkoutUrl: first.payment.checkoutUrl } })
    expect(again.payment.checkoutUrl).toMatch(/^https?:\/\//)
    expect(processor.sessions.size).toBe(1)
  })

  it('no_payment_required counts as paid', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const res = await deliver(sign(processor.complete(session.id, 'no_payment_required'), 'checkout.session.completed'))
    expect(res.body).toMatchObject({ outcome: 'completed' })
    expect((await findPayment(db, payment.id))?.status).toBe('completed')
  })

  it('an asynchronous method: completed (unpaid) -> processing, then async_payment_succeeded -> completed', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const first = await deliver(sign(processor.complete(session.id, 'unpaid'), 'checkout.session.completed'))
    expect(first.body).toMatchObject({ outcome: 'processing' })
    expect(await written(db, payment.id)).toMatchObject({ status: 'processing', outbox: [] })

    const second = await deliver(sign(processor.update(session.id, { payment_status: 'paid' }), 'checkout.session.async_payment_succeeded'))
    expect(second.body).toMatchObject({ outcome: 'completed' })
    expect(await written(db, payment.id)).toMatchObject({
      status: 'completed',
      audit: ['payment.created', 'payment.processing', 'payment.completed'],
      outbox: [{ subject: 'payment.completed', payment_id: payment.id }],
      providerEvents: 2,
    })
  })

  it('async_payment_failed fails a processing payment and writes payment.failed', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    await deliver(sign(processor.complete(session.id, 'unpaid'), 'checkout.session.completed'))
    const res = await deliver(sign(processor.session(session.id), 'checkout.session.async_payment_failed'))
    expect(res.body).toMatchObject({ outcome: 'failed' })
    const after = await findPayment(db, payment.id)
    expect(after).toMatchObject({ status: 'failed' })
    expect(after?.failureReason).toMatch(/failed at the processor/)
    expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.failed', payment_id: payment.id }])
  })

  it('checkout.session.expired cancels a pending payment and writes payment.canceled', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const res = await deliver(sign(processor.update(session.id, { status: 'expired', url: null }), 'checkout.session.expired'))
    expect(res.body).toMatchObject({ outcome: 'canceled' })
    expect(await findPayment(db, payment.id)).toMatchObject({ status: 'canceled', failureReason: 'session expired at the card processor' })
    expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.canceled', payment_id: payment.id }])
  })

  it('finds the payment by client_reference_id when the webhook beats the stored session id', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    await db('payments').where({ id: payment.id }).update({ provider_reference: null })
    const res = await deliver(sign(processor.complete(session.id), 'checkout.session.completed'))
    expect(res.body).toMatchObject({ outcome: 'completed' })
    expect((await findPayment(db, payment.id))?.status).toBe('completed')
  })

  describe('refused before anything is written', () => {
    it('a bad signature is 401 invalid_signature: wrong secret, changed body, stale timestamp', async () => {
      const { db, clock, processor, logs, opened, sign, deliver } = await setup()
      const { payment, session } = await opened()
      const before = await written(db, payment.id)
      const good = sign(processor.complete(session.id), 'checkout.session.completed')

      const otherSecret = { payload: good.payload, signature: signHeader(good.payload, `whsec_${crypto.randomBytes(24).toString('base64')}`, clock.seconds) }
      const changedBody = { payload: good.payload.replace('"paid"', '"unpaid"'), signature: good.signature }
      for (const delivery of [otherSecret, changedBody, { payload: good.payload, signature: 'garbage' }]) {
        const res = await deliver(delivery)
        expect(res).toEqual({ status: 401, body: { error: 'invalid signature', details: expect.stringContaining('Provider-Signature') } })
      }
      clock.advance(6 * 60_000)
      expect((await deliver(good)).status).toBe(401)
      expect(await written(db, payment.id)).toEqual(before)

      const text = logs.text()
      expect(text).toContain('invalid signature')
      for (const secret of [WEBHOOK_SECRET, SECRET_KEY, good.signature, good.signature.split('v1=')[1] as string]) expect(text).not.toContain(secret)
    })

    it('a missing Provider-Signature is 401 missing_signature', async () => {
      const { db, processor, opened, sign, deliver } = await setup()
      const { payment, session } = await opened()
      const before = await written(db, payment.id)
      const res = await deliver({ payload: sign(processor.complete(session.id), 'checkout.session.completed').payload })
      expect(res).toEqual({ status: 401, body: { error: 'missing signature', details: 'the Provider-Signature header is required' } })
      expect(await written(db, payment.id)).toEqual(before)
    })

    it('a signed body that is not JSON is 400', async () => {
      const { db, clock, opened, deliver } = await setup()
      const { payment } = await opened()
      const before = await written(db, payment.id)
      const payload = '{"id": "evt_1", "type": "checkout.session.completed", '
      const res = await deliver({ payload, signature: signHeader(payload, WEBHOOK_SECRET, clock.seconds) })
      expect(res).toEqual({ status: 400, body: { error: 'malformed JSON', details: 'the webhook body is not valid JSON' } })
      expect(await written(db, payment.id)).toEqual(before)
    })

    it('a body over the limit is 413', async () => {
      const { db, clock, url, opened, deliver } = await setup({ bodyLimitBytes: 2_048 })
      const { payment } = await opened()
      const before = await written(db, payment.id)
      const payload = JSON.stringify({ id: 'evt_big', type: 'checkout.session.completed', padding: 'x'.repeat(4_096) })
      const res = await deliver({ payload, signature: signHeader(payload, WEBHOOK_SECRET, clock.seconds) })
      const tooLarge = { status: 413, body: { error: 'request body too large', details: 'the request body exceeds the limit of 2048 bytes' } }
      expect(res).toEqual(tooLarge)
      // Without a Content-Length (chunked), the limit stops the read part-way.
      const chunks = [payload.slice(0, 1_500), payload.slice(1_500)]
      const chunked = await fetch(`${url}${CARD_WEBHOOK_PATH}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Provider-Signature': signHeader(payload, WEBHOOK_SECRET, clock.seconds) },
        body: new ReadableStream({
          pull(controller) {
            const next = chunks.shift()
            if (next === undefined) controller.close()
            else controller.enqueue(new TextEncoder().encode(next))
          },
        }),
        duplex: 'half',
      } as RequestInit & { duplex: 'half' })
      expect({ status: chunked.status, body: await chunked.json() }).toEqual(tooLarge)
      expect(await written(db, payment.id)).toEqual(before)
    })
  })

  it('a replayed event is answered duplicate and changes nothing', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const delivery = sign(processor.complete(session.id), 'checkout.session.completed')
    expect((await deliver(delivery)).body).toMatchObject({ outcome: 'completed' })
    const once = await written(db, payment.id)
    const replay = await deliver(delivery, 'whk-req-2')
    expect(replay).toEqual({ status: 200, body: { status: 'ok', outcome: 'duplicate' } })
    expect(await written(db, payment.id)).toEqual(once)
    expect(once.outbox).toEqual([{ subject: 'payment.completed', payment_id: payment.id }])
  })

  it('two deliveries of one event at the same time: one completes, the other is a duplicate', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const delivery = sign(processor.complete(session.id), 'checkout.session.completed')
    const outcomes = (await Promise.all([deliver(delivery, 'whk-a'), deliver(delivery, 'whk-b')])).map((r) => r.body.outcome)
    expect(outcomes.sort()).toEqual(['completed', 'duplicate'])
    expect(await written(db, payment.id)).toMatchObject({ status: 'completed', outbox: [{ subject: 'payment.completed', payment_id: payment.id }], providerEvents: 1 })
  })

  it('an event for another session of the payment is recorded as webhook.ignored and moves nothing', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const other = { ...processor.complete(session.id), id: 'cs_test_not_the_stored_one' }
    expect((await deliver(sign(other, 'checkout.session.completed'))).body).toMatchObject({ outcome: 'ignored_session' })
    expect(await written(db, payment.id)).toMatchObject({ status: 'pending', audit: ['payment.created', 'webhook.ignored'], outbox: [] })
  })

  it('expired after completion is ignored_state, recorded as webhook.ignored, and cancels nothing', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    await deliver(sign(processor.complete(session.id), 'checkout.session.completed'))
    const res = await deliver(sign(processor.session(session.id), 'checkout.session.expired'), 'whk-late')
    expect(res).toEqual({ status: 200, body: { status: 'ok', outcome: 'ignored_state' } })
    const after = await written(db, payment.id)
    expect(after).toMatchObject({ status: 'completed', outbox: [{ subject: 'payment.completed', payment_id: payment.id }], providerEvents: 2 })
    expect((await paymentEvents(db, payment.id)).at(-1)).toMatchObject({
      eventType: 'webhook.ignored',
      actor: 'provider:card',
      requestId: 'whk-late',
      details: expect.objectContaining({ event_type: 'checkout.session.expired', status: 'completed' }),
    })
  })

  it('an amount or currency that does not match the payment fails it', async () => {
    const { db, processor, initiate, sign, deliver } = await setup()
    const { payment } = await initiate('order-amount')
    const session = processor.complete(payment.providerReference as string)
    const res = await deliver(sign(processor.update(session.id, { amount_total: 1 }), 'checkout.session.completed'))
    expect(res.body).toMatchObject({ outcome: 'amount_mismatch' })
    const after = await findPayment(db, payment.id)
    expect(after).toMatchObject({ status: 'failed' })
    expect(after?.failureReason).toBe('amount mismatch: the card processor reported 1 usd, the payment is 1500 usd')
    expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.failed', payment_id: payment.id }])

    const { payment: other } = await initiate('order-currency')
    const eur = processor.update(processor.complete(other.providerReference as string).id, { currency: 'eur' })
    expect((await deliver(sign(eur, 'checkout.session.completed'))).body).toMatchObject({ outcome: 'amount_mismatch' })
    expect((await findPayment(db, other.id))?.failureReason).toMatch(/1500 eur, the payment is 1500 usd/)
  })

  it('answers 200 and writes nothing for an unknown payment or an event type it does not handle', async () => {
    const { db, processor, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const before = await written(db, payment.id)
    const stranger = { ...processor.session(session.id), id: 'cs_test_someone_else', client_reference_id: null, metadata: {} }
    expect((await deliver(sign(stranger, 'checkout.session.completed'))).body).toEqual({ status: 'ok', outcome: 'unknown_payment' })
    expect((await deliver(sign(processor.session(session.id), 'payment_intent.created'))).body).toEqual({ status: 'ok', outcome: 'ignored' })
    expect(await written(db, payment.id)).toEqual(before)
  })

  it('processor down at InitiatePayment: UnavailableError and the payment is failed', async () => {
    const { db, processor, initiate } = await setup()
    processor.failNext(3) // the first call and the SDK's two retries
    const error = await initiate('order-down').catch((err: unknown) => err)
    expect(error).toBeInstanceOf(UnavailableError)
    const row = (await db('payments').where({ idempotency_key: 'order-down' }).first('id')) as { id: string }
    const payment = await findPayment(db, row.id)
    expect(payment).toMatchObject({ status: 'failed', providerReference: null, failureReason: 'provider card could not set up the payment' })
    expect((await written(db, row.id)).outbox).toEqual([{ subject: 'payment.failed', payment_id: row.id }])
    // Every attempt carried the same idempotency key, so a retry could never create a second session.
    expect(processor.requests.map((r) => r.idempotencyKey)).toEqual(Array(3).fill(`payment:${row.id}`))
    expect(processor.sessions.size).toBe(0)
  }, 15_000)

  it('CancelPayment expires the session at the processor; the expired webhook that follows is ignored_state', async () => {
    const { db, processor, card, service, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    const canceled = await service.cancelPayment(payment.id, null, 'changed my mind', { actor: 'user:test' })
    expect(canceled.status).toBe('canceled')
    expect(processor.session(session.id).status).toBe('expired')
    // Closing an already closed session again is not an error.
    await expect(card.cancelPayment(session.id)).resolves.toBe('closed')
    expect((await deliver(sign(processor.session(session.id), 'checkout.session.expired'))).body).toMatchObject({ outcome: 'ignored_state' })
    expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.canceled', payment_id: payment.id }])
  })

  it('a payment canceled while its checkout session is being created: the session is closed once it exists, and no checkout url is handed out', async () => {
    const { db, processor, service, initiate, logs } = await setup()
    const hold = processor.holdNext()
    const initiating = initiate('order-race')
    await hold.arrived
    const row = (await db('payments').where({ idempotency_key: 'order-race' }).first('id')) as { id: string }
    // No session yet: the cancel has nothing to close at the processor.
    expect(await service.cancelPayment(row.id, null, 'changed my mind', { actor: 'user:test' })).toMatchObject({ status: 'canceled' })
    hold.release()
    const { payment } = await initiating
    expect(payment).toMatchObject({ id: row.id, status: 'canceled', checkoutUrl: null })
    expect(processor.sessions.size).toBe(1)
    const [session] = [...processor.sessions.values()]
    expect(session?.status).toBe('expired')
    expect(payment.providerReference).toBe(session?.id)
    expect(logs.text()).not.toContain('refund')
  })

  it('a slow first InitiatePayment finishing after its retry set the session up and the payer paid: nothing is closed, nothing flagged', async () => {
    const { db, processor, initiate, sign, deliver, logs } = await setup()
    const hold = processor.holdNext()
    const first = initiate('order-slow')
    await hold.arrived
    const retried = await initiate('order-slow')
    expect(retried).toMatchObject({ created: false, payment: { status: 'pending' } })
    const session = processor.session(retried.payment.providerReference as string)
    expect((await deliver(sign(processor.complete(session.id, 'paid'), 'checkout.session.completed'))).body).toMatchObject({ outcome: 'completed' })
    hold.release()
    expect((await first).payment).toMatchObject({ id: retried.payment.id, status: 'completed', providerReference: session.id })
    expect(processor.session(session.id).status).toBe('complete')
    expect(processor.sessions.size).toBe(1)
    expect(logs.text()).not.toContain('refund')
    expect((await findPayment(db, retried.payment.id))?.checkoutUrl).toBe(session.url)
  })

  it('CancelPayment of a session the payer has already paid cancels nothing; the webhook that follows completes it', async () => {
    const { db, processor, service, opened, sign, deliver } = await setup()
    const { payment, session } = await opened()
    processor.complete(session.id) // paid; the webhook has not arrived yet
    const refused = await service.cancelPayment(payment.id, null, 'changed my mind', { actor: 'user:test' }).catch((err: unknown) => err)
    expect(refused).toBeInstanceOf(PaymentPreconditionError)
    expect((refused as Error).message).toBe(`payment ${payment.id} has been paid at its provider; it completes as soon as the provider's notification arrives`)
    expect((await findPayment(db, payment.id))?.status).toBe('pending')
    expect((await deliver(sign(processor.session(session.id), 'checkout.session.completed'))).body).toMatchObject({ outcome: 'completed' })
    expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.completed', payment_id: payment.id }])
  })

  it('CancelPayment while the processor cannot be reached: UNAVAILABLE, and the payment stays pending with its session open', async () => {
    const { db, processor, service, opened } = await setup()
    const { payment, session } = await opened()
    processor.failNext(3) // the call and the SDK's two retries
    const refused = await service.cancelPayment(payment.id, null, 'changed my mind', { actor: 'user:test' }).catch((err: unknown) => err)
    expect(refused).toBeInstanceOf(UnavailableError)
    expect(refused).toMatchObject({ message: "payment provider card could not close the payment's session", details: 'the payment is still pending; try again' })
    expect(await written(db, payment.id)).toMatchObject({ status: 'pending', outbox: [] })
    expect(processor.session(session.id).status).toBe('open')
  }, 15_000)

  it('session expiry closes the session first: a paid one (webhook lost) is reconciled to completed, an unreachable processor is tried again after a minute', async () => {
    const { db, processor, service, clock, initiate } = await setup()
    const paid = (await initiate('order-paid')).payment
    const open = (await initiate('order-open')).payment
    processor.complete(paid.providerReference as string)
    clock.advance(31 * 60_000)
    processor.failNext(100)
    expect(await service.expireSessions()).toBe(0)
    expect([(await findPayment(db, paid.id))?.status, (await findPayment(db, open.id))?.status]).toEqual(['pending', 'pending'])
    processor.failNext(0)
    clock.advance(60_000)
    expect(await service.expireSessions()).toBe(1)
    expect((await findPayment(db, open.id))?.status).toBe('canceled')
    expect(processor.session(open.providerReference as string).status).toBe('expired')
    expect(await written(db, paid.id)).toMatchObject({ status: 'completed', providerEvents: 0 })
    expect(await outboxOf(db, paid.id)).toEqual(['payment.completed'])
    expect(Number(((await db('payment_retries').count({ n: '*' }).first()) as { n: number | string }).n)).toBe(0)
  }, 30_000)

  describe('signed timestamp (issue 15, item 9)', () => {
    it('more than 5 minutes off in either direction is 401 invalid_signature and writes nothing: +6 min, +1 day, +1 year, -6 min', async () => {
      const { db, clock, processor, logs, opened, deliver } = await setup()
      const { payment, session } = await opened()
      const before = await written(db, payment.id)
      processor.complete(session.id)
      for (const offset of [6 * 60, 86_400, 365 * 86_400, -6 * 60]) {
        const delivery = signedDelivery(processor.session(session.id), 'checkout.session.completed', { secret: WEBHOOK_SECRET, timestamp: clock.seconds + offset })
        const res = await deliver(delivery)
        expect({ offset, ...res }).toEqual({ offset, status: 401, body: { error: 'invalid signature', details: expect.stringContaining('more than 5 minutes off') } })
        expect(logs.text()).not.toContain(delivery.signature)
      }
      expect(await written(db, payment.id)).toEqual(before)
    })

    it('within 5 minutes either way is accepted: +4 min completes the payment', async () => {
      const { db, clock, processor, opened, deliver } = await setup()
      const { payment, session } = await opened()
      const ahead = signedDelivery(processor.complete(session.id), 'checkout.session.completed', { secret: WEBHOOK_SECRET, timestamp: clock.seconds + 4 * 60 })
      expect((await deliver(ahead)).body).toEqual({ status: 'ok', outcome: 'completed' })
      expect((await findPayment(db, payment.id))?.status).toBe('completed')
    })
  })

  describe('session expiry pages and backs off (issue 15, item 5)', () => {
    const expireRequests = (processor: FakeCardProcessor) => processor.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/expire')).length

    it('payments it cannot expire do not hold up newer ones: 101 stuck before one that can go, in pages of 100', async () => {
      const { db, processor, service, clock, initiate } = await setup({ maxNetworkRetries: 0 })
      const stuck: string[] = []
      for (let i = 0; i < 101; i++) {
        const { payment } = await initiate(`order-stuck-${i}`)
        stuck.push(payment.id)
        processor.failingSessions.add(payment.providerReference as string)
      }
      clock.advance(1_000)
      const newest = (await initiate('order-newest')).payment
      clock.advance(31 * 60_000)
      expect(await service.expireSessions()).toBe(1)
      expect((await findPayment(db, newest.id))?.status).toBe('canceled')
      const statuses = (await db('payments').whereIn('id', stuck).select('status')) as Array<{ status: string }>
      expect(new Set(statuses.map((r) => r.status))).toEqual(new Set(['pending']))
      // One attempt each: 101 failed closes and the one that worked.
      expect(expireRequests(processor)).toBe(102)
      expect(Number(((await db('payment_retries').where({ job: 'expiry' }).count({ n: '*' }).first()) as { n: number | string }).n)).toBe(101)
    }, 60_000)

    it('a payment whose session cannot be closed is retried after 1, 2, 4 minutes, not on every run; once closed, it is canceled and its back-off forgotten', async () => {
      const { db, processor, service, clock, opened } = await setup({ maxNetworkRetries: 0 })
      const { payment, session } = await opened()
      processor.failingSessions.add(session.id)
      clock.advance(31 * 60_000)
      const calls: number[] = []
      const run = async (advanceMs: number) => {
        clock.advance(advanceMs)
        await service.expireSessions()
        calls.push(expireRequests(processor))
      }
      await run(0) // attempt 1 fails: next in 1 minute
      await run(0)
      await run(59_000)
      await run(1_000) // attempt 2 fails: next in 2 minutes
      await run(60_000)
      await run(60_000) // attempt 3 fails: next in 4 minutes
      await run(3 * 60_000)
      expect(calls).toEqual([1, 1, 1, 2, 2, 3, 3])
      const retry = (await db('payment_retries').where({ payment_id: payment.id, job: 'expiry' }).first()) as { attempts: number; last_error: string }
      expect(Number(retry.attempts)).toBe(3)
      expect(retry.last_error).toBe("payment provider card could not close the payment's session")
      processor.failingSessions.delete(session.id)
      await run(60_000)
      expect(calls.at(-1)).toBe(4)
      expect((await findPayment(db, payment.id))?.status).toBe('canceled')
      expect(await db('payment_retries').where({ payment_id: payment.id })).toEqual([])
    })
  })

  describe('reconciliation (issue 15, item 4): the webhook was dropped', () => {
    const retrieves = (processor: FakeCardProcessor) => processor.requests.filter((r) => r.method === 'GET').length

    it('a paid session is completed once past expiry, through the webhook rules; a webhook arriving later changes nothing', async () => {
      const { db, clock, processor, service, opened, sign, deliver } = await setup()
      const { payment, session } = await opened()
      processor.complete(session.id, 'paid')
      clock.advance(10 * 60_000)
      // Not yet past expiry: left to the webhook, the processor is not asked.
      expect(await service.reconcilePayments()).toBe(0)
      expect(retrieves(processor)).toBe(0)
      clock.advance(21 * 60_000)
      expect(await service.reconcilePayments()).toBe(1)
      expect(await written(db, payment.id)).toMatchObject({
        status: 'completed',
        audit: ['payment.created', 'payment.processing', 'payment.completed'],
        outbox: [{ subject: 'payment.completed', payment_id: payment.id }],
      })
      expect((await paymentEvents(db, payment.id)).at(-1)).toMatchObject({
        actor: 'system:reconciliation',
        details: expect.objectContaining({ source: 'reconciliation', session_id: session.id, to: 'completed' }),
      })
      expect((await deliver(sign(processor.session(session.id), 'checkout.session.completed'))).body).toMatchObject({ outcome: 'ignored_state' })
      expect(await service.reconcilePayments()).toBe(0)
      expect((await written(db, payment.id)).outbox).toEqual([{ subject: 'payment.completed', payment_id: payment.id }])
    })

    it('a webhook arriving while reconciliation asks the processor: completed once', async () => {
      const { db, clock, processor, service, opened, sign, deliver } = await setup()
      const { payment, session } = await opened()
      processor.complete(session.id, 'paid')
      clock.advance(31 * 60_000)
      const hold = processor.holdNext()
      const reconciling = service.reconcilePayments()
      await hold.arrived
      expect((await deliver(sign(processor.session(session.id), 'checkout.session.completed'))).body).toMatchObject({ outcome: 'completed' })
      hold.release()
      expect(await reconciling).toBe(0)
      expect(await written(db, payment.id)).toMatchObject({
        status: 'completed',
        audit: ['payment.created', 'payment.processing', 'payment.completed'],
        outbox: [{ subject: 'payment.completed', payment_id: payment.id }],
      })
    })

    it('expired at the processor -> canceled; complete but unpaid -> processing, then paid -> completed; a wrong amount -> failed', async () => {
      const { db, clock, processor, service, initiate } = await setup()
      const expired = (await initiate('order-expired')).payment
      const slow = (await initiate('order-async')).payment
      const wrong = (await initiate('order-wrong')).payment
      processor.update(expired.providerReference as string, { status: 'expired', url: null })
      processor.complete(slow.providerReference as string, 'unpaid')
      processor.update(processor.complete(wrong.providerReference as string).id, { amount_total: 1 })
      clock.advance(31 * 60_000)
      expect(await service.reconcilePayments()).toBe(3)
      expect(await findPayment(db, expired.id)).toMatchObject({ status: 'canceled', failureReason: 'session expired at the card processor' })
      expect(await findPayment(db, slow.id)).toMatchObject({ status: 'processing' })
      expect(await findPayment(db, wrong.id)).toMatchObject({ status: 'failed', failureReason: expect.stringMatching(/^amount mismatch/) })
      processor.update(slow.providerReference as string, { payment_status: 'paid' })
      expect(await service.reconcilePayments()).toBe(1)
      expect((await findPayment(db, slow.id))?.status).toBe('completed')
      expect(await outboxOf(db, slow.id)).toEqual(['payment.completed'])
    })

    it('nothing new at the processor (still open), or the processor down: asked again with growing delay, not on every run', async () => {
      const { db, clock, processor, service, opened } = await setup({ maxNetworkRetries: 0 })
      const { payment, session } = await opened()
      clock.advance(31 * 60_000)
      expect(await service.reconcilePayments()).toBe(0)
      expect(retrieves(processor)).toBe(1)
      expect(await service.reconcilePayments()).toBe(0)
      expect(retrieves(processor)).toBe(1)
      processor.failingSessions.add(session.id)
      clock.advance(60_000)
      expect(await service.reconcilePayments()).toBe(0)
      expect(retrieves(processor)).toBe(2)
      clock.advance(60_000)
      expect(await service.reconcilePayments()).toBe(0)
      expect(retrieves(processor)).toBe(2)
      processor.failingSessions.delete(session.id)
      processor.complete(session.id)
      clock.advance(60_000)
      expect(await service.reconcilePayments()).toBe(1)
      expect((await findPayment(db, payment.id))?.status).toBe('completed')
      expect(await db('payment_retries').where({ payment_id: payment.id })).toEqual([])
    })
  })

  it('getPaymentStatus maps the session state', async () => {
    const { processor, card, opened } = await setup()
    const { session } = await opened()
    expect(await card.getPaymentStatus(session.id)).toBe('pending')
    processor.complete(session.id, 'unpaid')
    expect(await card.getPaymentStatus(session.id)).toBe('processing')
    processor.update(session.id, { payment_status: 'paid' })
    expect(await card.getPaymentStatus(session.id)).toBe('completed')
    processor.update(session.id, { status: 'expired' })
    expect(await card.getPaymentStatus(session.id)).toBe('canceled')
    expect(await card.getPaymentStatus('cs_test_missing')).toBe('unknown')
  })
})
