/**
 * POST/GET /api/v1/payments, /payments/{id}/cancel, /quotes and /payment-methods against a real
 * payment service (its own database, mutual-TLS gRPC on loopback, the test provider), on both
 * databases: the spec's link rules, idempotency, ownership and every refusal, with nothing
 * half-written after one.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { fromJson } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { PaymentClient } from '../../../src/payments/client.js'
import { paymentEventSchema } from '../../../src/payments/events.js'
import { PaymentGrpcServer } from '../../../src/payments/grpc-server.js'
import { parsePricingConfig } from '../../../src/payments/pricing.js'
import { ProviderRegistry } from '../../../src/payments/providers/registry.js'
import { TestProvider } from '../../../src/payments/providers/test.js'
import { PaymentService } from '../../../src/payments/service.js'
import { CONTROL_PLANE_CLIENT_NAME, ensurePaymentDevCertificates, type PaymentTlsFiles } from '../../../src/payments/tls.js'
import { activatePayment } from '../../../src/subscriptions/activation.js'
import { createTestDatabase, DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'

const logger = createLogger({ level: 'silent' })
const resources = new Resources()
afterEach(() => resources.cleanup())

const PRICING = parsePricingConfig({
  currency: 'USD',
  pricing: { devnet: { full: { '1w': 500, '1m': 1500 }, archive: { '1m': 3000 } } },
  crypto: { supported_currencies: ['USDC'], exchange_rates: { USDC: '1.00' } },
})

let tlsDir: string
let pki: PaymentTlsFiles
beforeAll(() => {
  tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-payments-api-'))
  pki = ensurePaymentDevCertificates(tlsDir)
})
afterAll(() => fs.rmSync(tlsDir, { recursive: true, force: true }))

interface Payment {
  id: string
  status: string
  subscription_ids: string[]
  amount_minor: number
  [key: string]: unknown
}

async function paymentStack(dialect: (typeof DIALECTS)[number]) {
  const { db } = await resources.database(dialect)
  const payments = await createTestDatabase(dialect, { database: 'payments' })
  resources.add(() => payments.destroy())
  const provider = new TestProvider({ db: payments.db, logger, now: () => new Date(), delayMs: 0, failureRate: 0 })
  const service = new PaymentService({ db: payments.db, logger, pricing: () => PRICING, providers: new ProviderRegistry([provider]) })
  const server = new PaymentGrpcServer({
    service,
    logger,
    allowedClients: [CONTROL_PLANE_CLIENT_NAME],
    tls: { ca: fs.readFileSync(pki.caFile), cert: fs.readFileSync(pki.serverCertFile), key: fs.readFileSync(pki.serverKeyFile) },
  })
  const port = await server.listen('127.0.0.1', 0)
  let serverClosed = false
  const closeServer = async () => {
    if (serverClosed) return
    serverClosed = true
    await server.close(100)
  }
  resources.add(closeServer)
  const client = pki.clients[0] as PaymentTlsFiles['clients'][number]
  const paymentClient = new PaymentClient({ target: `127.0.0.1:${port}`, ca: fs.readFileSync(pki.caFile), cert: fs.readFileSync(client.certFile), key: fs.readFileSync(client.keyFile), timeoutMs: 3_000 })
  resources.add(async () => paymentClient.close())
  const api = await startAuthApi(resources, db, { payments: paymentClient })
  const alice = await newUser(db)
  const bob = await newUser(db)
  const root = await newUser(db, { admin: true })
  const keys = {
    alice: (await newKey(db, alice.id, { scopes: ['*'] })).key,
    aliceReadOnly: (await newKey(db, alice.id, { scopes: ['payments:read', 'subscriptions:read'] })).key,
    bob: (await newKey(db, bob.id, { scopes: ['*'] })).key,
    admin: (await newKey(db, root.id, { scopes: ['*', 'admin'], admin: true })).key,
  }
  return { db, paymentsDb: payments.db, provider, paymentClient, api, alice, bob, keys, closeServer }
}

async function subscribe(api: AuthApi, key: string, body: Record<string, string> = { chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }): Promise<string> {
  const res = await api.call('POST', '/api/v1/subscriptions', { bearer: key, body })
  expect(res.status).toBe(201)
  return (res.body as { id: string }).id
}

function payBody(subscriptionIds: string[], key: string, overrides: Record<string, unknown> = {}) {
  return {
    items: subscriptionIds.map(() => ({ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' })),
    subscription_ids: subscriptionIds,
    method: 'card',
    idempotency_key: key,
    return_url: 'https://app.example.com/paid',
    cancel_url: 'https://app.example.com/canceled',
    ...overrides,
  }
}

async function counts(db: Db, paymentsDb: Db) {
  const n = async (d: Db, table: string) => Number(((await d(table).count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n)
  return { payments: await n(paymentsDb, 'payments'), mirror: await n(db, 'payment_requests'), linked: await n(db, 'subscriptions').then(async () => Number(((await db('subscriptions').whereNotNull('payment_id').count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n)) }
}

describe.each(DIALECTS)('payments API on %s', (dialect) => {
  it('creates a payment for pending subscriptions (201), links them, and a retry with the same key returns it (200)', async () => {
    const t = await paymentStack(dialect)
    const sub = await subscribe(t.api, t.keys.alice)
    const created = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'order-1') })
    expect(created.status).toBe(201)
    const payment = created.body as Payment
    expect(payment).toMatchObject({ status: 'pending', method: 'card', provider: 'test', amount_minor: 1500, currency: 'USD', subscription_ids: [sub], user_id: t.alice.id, checkout_url: null, crypto: null })
    expect(await t.db('subscriptions').where({ id: sub }).first('payment_id', 'status')).toEqual({ payment_id: payment.id, status: 'pending_payment' })

    const retry = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'order-1') })
    expect(retry.status).toBe(200)
    expect((retry.body as Payment).id).toBe(payment.id)
    const reused = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'order-1', { method: 'crypto', crypto_currency: 'USDC' }) })
    expect(reused.status).toBe(409)
    expect(await counts(t.db, t.paymentsDb)).toEqual({ payments: 1, mirror: 1, linked: 1 })

    // Live state through GET; listing is the caller's own; another user's is 404, an admin sees it.
    await t.provider.settleDue()
    const shown = await t.api.call('GET', `/api/v1/payments/${payment.id}`, { bearer: t.keys.aliceReadOnly })
    expect(shown).toMatchObject({ status: 200, body: { id: payment.id, status: 'completed' } })
    const list = await t.api.call('GET', '/api/v1/payments', { bearer: t.keys.alice })
    expect((list.body as { items: Payment[] }).items.map((p) => [p.id, p.status])).toEqual([[payment.id, 'completed']])
    expect((await t.api.call('GET', '/api/v1/payments', { bearer: t.keys.bob })).body).toEqual({ items: [], next_cursor: null })
    const foreign = await t.api.call('GET', `/api/v1/payments/${payment.id}`, { bearer: t.keys.bob })
    expect(foreign).toMatchObject({ status: 404, body: { error: 'not found' } })
    expect((await t.api.call('GET', '/api/v1/payments/not-a-uuid', { bearer: t.keys.alice })).status).toBe(404)
    expect((await t.api.call('GET', `/api/v1/payments/${payment.id}`, { bearer: t.keys.admin })).status).toBe(200)

    // Once paid (activation moved the subscription on), a retry still returns the same payment.
    await t.db('subscriptions').where({ id: sub }).update({ status: 'active' })
    const late = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'order-1') })
    expect(late).toMatchObject({ status: 200, body: { id: payment.id, status: 'completed' } })
    expect(await counts(t.db, t.paymentsDb)).toEqual({ payments: 1, mirror: 1, linked: 1 })
  })

  it('two payments racing for one subscription under different keys: one links it, the other is 409 and canceled', async () => {
    const t = await paymentStack(dialect)
    const sub = await subscribe(t.api, t.keys.alice)
    const results = await Promise.all(['race-a', 'race-b', 'race-c'].map((key) => t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], key) })))
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409])
    const winner = results.find((r) => r.status === 201)?.body as Payment
    expect(await t.db('subscriptions').where({ id: sub }).first('payment_id')).toEqual({ payment_id: winner.id })
    expect(await t.db('payment_requests').pluck('id')).toEqual([winner.id])
    // Losers that reached the payment service were canceled there; none can complete.
    const open = await t.paymentsDb('payments').whereIn('status', ['pending', 'processing']).pluck('id')
    expect(open).toEqual([winner.id])
  })

  describe('a payment that completes before POST /payments has linked its subscription (issue 15, item 12)', () => {
    /** The provider settles and the control plane consumes payment.completed between InitiatePayment and the link. */
    async function completeBeforeLink(t: Awaited<ReturnType<typeof paymentStack>>, beforeSettle: () => Promise<void> = async () => {}) {
      const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
      const initiate = t.paymentClient.initiatePayment.bind(t.paymentClient)
      t.paymentClient.initiatePayment = async (request) => {
        const answer = await initiate(request)
        expect(answer.payment.status).toBe('pending')
        await beforeSettle()
        expect(await t.provider.settleDue()).toBe(1)
        const row = (await t.paymentsDb('outbox').where({ subject: 'payment.completed' }).first('payload')) as { payload: unknown }
        await t.db.transaction((trx) => activatePayment(trx, paymentEventSchema.parse(fromJson(row.payload)), { logger, chains }, new Date()))
        return answer
      }
    }

    /** The subscription disappears between InitiatePayment and the link (not by the payment's activation). */
    function loseLinkAfterInitiate(t: Awaited<ReturnType<typeof paymentStack>>, sub: string): void {
      const initiate = t.paymentClient.initiatePayment.bind(t.paymentClient)
      t.paymentClient.initiatePayment = async (request) => {
        const answer = await initiate(request)
        await t.db('subscriptions').where({ id: sub }).del()
        return answer
      }
    }

    it('matched path: answers with the completed payment (not "canceled"), the subscription active and the mirror completed', async () => {
      const t = await paymentStack(dialect)
      const sub = await subscribe(t.api, t.keys.alice)
      await completeBeforeLink(t)
      const res = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'early') })
      expect(res).toMatchObject({ status: 201, body: { status: 'completed', subscription_ids: [sub] } })
      const payment = res.body as Payment
      expect(await t.db('subscriptions').where({ id: sub }).first('status', 'payment_id')).toEqual({ status: 'active', payment_id: payment.id })
      expect(await t.db('payment_requests').where({ id: payment.id }).first('status')).toEqual({ status: 'completed' })
      expect(await t.paymentsDb('payments').where({ id: payment.id }).first('status')).toEqual({ status: 'completed' })
    })

    it('fallback path (the subscription was removed meanwhile): answers with the completed payment and its new subscription is active', async () => {
      const t = await paymentStack(dialect)
      const sub = await subscribe(t.api, t.keys.alice)
      // The cleanup removed the unpaid subscription before the event arrived: activation falls back to the line items.
      await completeBeforeLink(t, async () => {
        await t.db('subscriptions').where({ id: sub }).del()
      })
      const res = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'early-fallback') })
      expect(res).toMatchObject({ status: 201, body: { status: 'completed' } })
      const payment = res.body as Payment
      expect(await t.db('subscriptions').where({ payment_id: payment.id }).select('status', 'user_id')).toEqual([{ status: 'active', user_id: t.alice.id }])
      expect(await t.db('payment_requests').where({ id: payment.id }).first('status')).toEqual({ status: 'completed' })
    })

    it('a payment still open when its link is lost is canceled, and the 409 says so', async () => {
      const t = await paymentStack(dialect)
      const sub = await subscribe(t.api, t.keys.alice)
      loseLinkAfterInitiate(t, sub)
      const res = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'lost') })
      expect(res).toMatchObject({ status: 409, body: { error: `subscription ${sub} changed while the payment was being set up`, details: expect.stringMatching(/was canceled and nothing was charged; try again$/) } })
      expect(await t.paymentsDb('payments').pluck('status')).toEqual(['canceled'])
      expect(Number(((await t.db('payment_requests').count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n)).toBe(0)
    })
    it('a crypto payment paid already when its link is lost is not canceled, and the 409 says it completes once the transfer is confirmed', async () => {
      const t = await paymentStack(dialect)
      const sub = await subscribe(t.api, t.keys.alice)
      loseLinkAfterInitiate(t, sub)
      // The customer has paid: a transfer paying it in full waits for its confirmations, so the provider refuses to close it.
      ;(t.provider as { cancelPayment(reference: string): Promise<'closed' | 'paid'> }).cancelPayment = async () => 'paid'
      const res = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'paid-meanwhile', { method: 'crypto', crypto_currency: 'USDC' }) })
      const [id] = (await t.paymentsDb('payments').pluck('id')) as string[]
      expect(res).toMatchObject({
        status: 409,
        body: { details: `payment ${id} has been paid and completes once the transfer is confirmed: do not pay again; follow it with \`nodeplane payment show --id ${id}\`` },
      })
      expect(await t.paymentsDb('payments').pluck('status')).toEqual(['pending'])
    })
  })

  it('refuses invalid links and bodies with the spec statuses, writing nothing', async () => {
    const t = await paymentStack(dialect)
    const sub = await subscribe(t.api, t.keys.alice)
    const bobs = await subscribe(t.api, t.keys.bob)
    const archive = await subscribe(t.api, t.keys.alice, { chain_profile_id: 'devnet', node_type: 'archive', duration: '1m' })
    const active = await subscribe(t.api, t.keys.alice, { chain_profile_id: 'devnet', node_type: 'full', duration: '1w' })
    await t.db('subscriptions').where({ id: active }).update({ status: 'active' })
    const cases: Array<[unknown, number, RegExp]> = [
      [payBody([bobs], 'k'), 404, /subscription .* not found/],
      [payBody(['0193a000-0000-7000-8000-00000000ffff'], 'k'), 404, /not found/],
      [payBody([active], 'k', { items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w' }] }), 409, /is active/],
      [payBody([archive], 'k'), 400, /items must be exactly what the linked subscriptions are for/],
      [payBody([sub, sub], 'k'), 400, /must not repeat/],
      [payBody([sub], 'k', { method: 'crypto' }), 400, /crypto_currency/],
      [payBody([sub], 'k', { crypto_currency: 'USDC' }), 400, /only for method crypto/],
      [payBody([sub], 'k', { method: 'crypto', crypto_currency: 'USDT' }), 400, /unsupported crypto currency "USDT"/],
      [payBody([sub], 'k', { return_url: 'not a url' }), 400, /return_url/],
      [payBody([sub], 'k', { cancel_url: 'ftp://example.com/x' }), 400, /cancel_url/],
      [payBody([sub], ''), 400, /idempotency_key/],
      [{ ...payBody([sub], 'k'), idempotency_key: undefined }, 400, /idempotency_key/],
      [payBody([], 'k', { items: [{ chain_profile_id: 'devnet', node_type: 'light', duration: '1m' }] }), 400, /no price for devnet\/light\/1m/],
      [payBody([sub], 'k', { extra: true }), 400, /extra/],
      [payBody([sub], 'k', { items: Array.from({ length: 21 }, () => ({ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' })) }), 400, /at most 20/],
    ]
    for (const [body, status, details] of cases) {
      const res = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body })
      expect(res.status, JSON.stringify(body).slice(0, 200)).toBe(status)
      expect(`${(res.body as { error: string }).error} ${(res.body as { details: string }).details}`).toMatch(details)
    }
    expect((await t.api.call('POST', '/api/v1/payments', { body: payBody([sub], 'k') })).status).toBe(401)
    expect((await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.aliceReadOnly, body: payBody([sub], 'k') })).status).toBe(403)
    expect(await counts(t.db, t.paymentsDb)).toEqual({ payments: 0, mirror: 0, linked: 0 })
  })

  it('a subscription whose payment completed, not yet activated by its event, cannot be paid again', async () => {
    const t = await paymentStack(dialect)
    const sub = await subscribe(t.api, t.keys.alice)
    const first = (await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'a') })).body as Payment
    expect(await t.provider.settleDue()).toBe(1)
    // The user looks at the payment: the mirror now says completed; no consumer has activated the subscription yet.
    expect(await t.api.call('GET', `/api/v1/payments/${first.id}`, { bearer: t.keys.alice })).toMatchObject({ status: 200, body: { status: 'completed' } })
    expect(await t.db('subscriptions').where({ id: sub }).first('status')).toEqual({ status: 'pending_payment' })
    const again = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'b') })
    expect(again).toMatchObject({ status: 409, body: { error: `subscription ${sub} is paid by payment ${first.id}`, details: 'it becomes active as soon as the payment is processed; do not pay again' } })
    expect(await t.db('subscriptions').where({ id: sub }).first('payment_id')).toEqual({ payment_id: first.id })
  })

  it('a subscription linked to an open payment cannot be linked again until that payment is canceled', async () => {
    const t = await paymentStack(dialect)
    const sub = await subscribe(t.api, t.keys.alice)
    const first = (await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'a') })).body as Payment
    const second = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'b') })
    expect(second).toMatchObject({ status: 409, body: { error: expect.stringMatching(/linked to payment .* still open/) } })
    expect((await t.api.call('POST', `/api/v1/payments/${first.id}/cancel`, { bearer: t.keys.bob })).status).toBe(404)
    const canceled = await t.api.call('POST', `/api/v1/payments/${first.id}/cancel`, { bearer: t.keys.alice })
    expect(canceled).toMatchObject({ status: 200, body: { status: 'canceled', changed: true } })
    // A repeat (docs/cli.md, "Repeats"): the payment as it is, nothing changed.
    const again = await t.api.call('POST', `/api/v1/payments/${first.id}/cancel`, { bearer: t.keys.alice })
    expect(again).toMatchObject({ status: 200, body: { id: first.id, status: 'canceled', changed: false } })
    expect((again.body as Payment & { changed: boolean }).updated_at).toBe((canceled.body as Payment).updated_at)
    const third = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'c') })
    expect(third.status).toBe(201)
    expect(await t.db('subscriptions').where({ id: sub }).first('payment_id')).toEqual({ payment_id: (third.body as Payment).id })
  })

  it('quotes, payment methods, and 503 when the payment service is down (nothing linked)', async () => {
    const t = await paymentStack(dialect)
    expect(await t.api.call('GET', '/api/v1/payment-methods', { bearer: t.keys.aliceReadOnly })).toMatchObject({ status: 200, body: { methods: ['card', 'crypto'] } })
    expect((await t.api.call('GET', '/api/v1/payment-methods', {})).status).toBe(401)
    const quote = await t.api.call('POST', '/api/v1/quotes', { bearer: t.keys.aliceReadOnly, body: { items: [{ chain_profile_id: 'devnet', node_type: 'archive', duration: '1m' }] } })
    expect(quote).toMatchObject({ status: 200, body: { amount_minor: 3000, currency: 'USD', crypto_amounts: { USDC: '30.000000' } } })
    expect((await t.api.call('POST', '/api/v1/quotes', { bearer: t.keys.aliceReadOnly, body: { items: [{ chain_profile_id: 'x', node_type: 'y', duration: '1m' }] } })).status).toBe(400)

    const sub = await subscribe(t.api, t.keys.alice)
    await t.closeServer()
    const down = await t.api.call('POST', '/api/v1/payments', { bearer: t.keys.alice, body: payBody([sub], 'down') })
    expect(down).toMatchObject({ status: 503, body: { error: 'the payment service is unavailable' } })
    expect((await t.api.call('GET', '/api/v1/payment-methods', { bearer: t.keys.alice })).status).toBe(503)
    expect(await t.db('subscriptions').where({ id: sub }).first('payment_id')).toEqual({ payment_id: null })
  })

  it('answers 503 on every payment route when no payment service is configured', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const alice = await newUser(db)
    const key = (await newKey(db, alice.id, { scopes: ['*'] })).key
    const res = await api.call('GET', '/api/v1/payment-methods', { bearer: key })
    expect(res).toMatchObject({ status: 503, body: { error: 'the payment service is not configured' } })
  })
})
