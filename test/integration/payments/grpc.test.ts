/**
 * The payment service over its real transport: gRPC with mutual TLS (TLS 1.3 minimum, client
 * common-name allow-list), the test provider, every refusal as a clear gRPC status, on both
 * databases.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import tls from 'node:tls'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { protoPath as healthProtoPath } from 'grpc-health-check'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { ConflictError, NotFoundError, UnavailableError, ValidationError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { PaymentClient } from '../../../src/payments/client.js'
import { IdempotencyKeyReusedError, PaymentPreconditionError } from '../../../src/payments/errors.js'
import { paymentServiceDefinition } from '../../../src/payments/grpc.js'
import { PaymentGrpcServer } from '../../../src/payments/grpc-server.js'
import { parsePricingConfig } from '../../../src/payments/pricing.js'
import { CardProvider } from '../../../src/payments/providers/card.js'
import { ProviderRegistry } from '../../../src/payments/providers/registry.js'
import { TestProvider } from '../../../src/payments/providers/test.js'
import { PaymentService } from '../../../src/payments/service.js'
import { paymentEvents } from '../../../src/payments/store.js'
import { CONTROL_PLANE_CLIENT_NAME, ensurePaymentDevCertificates, type PaymentTlsFiles } from '../../../src/payments/tls.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { freePort } from '../../helpers/ports.js'

const logger = createLogger({ level: 'silent' })
const CUSTOMER = '0193a000-0000-7000-8000-000000000001'
const OTHER = '0193a000-0000-7000-8000-000000000002'
const PRICING_SOURCE = {
  currency: 'USD',
  pricing: { devnet: { full: { '1w': 500, '1m': 1500 } } },
  crypto: { supported_currencies: ['USDC', 'ETH'], exchange_rates: { USDC: '1.00', ETH: '3000.00' }, quote_validity: '15m' },
  session: { expiry: '30m' },
}
const PRICING = parsePricingConfig(PRICING_SOURCE)

let dir: string
let pki: PaymentTlsFiles
let foreignPki: PaymentTlsFiles

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-payments-tls-'))
  pki = ensurePaymentDevCertificates(path.join(dir, 'ours'), { clients: [CONTROL_PLANE_CLIENT_NAME, 'intruder'] })
  foreignPki = ensurePaymentDevCertificates(path.join(dir, 'foreign'), { clients: [CONTROL_PLANE_CLIENT_NAME] })
})
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

function clientFiles(set: PaymentTlsFiles, name: string) {
  const c = set.clients.find((x) => x.name === name)
  if (!c) throw new Error(`no client ${name}`)
  return { cert: fs.readFileSync(c.certFile), key: fs.readFileSync(c.keyFile) }
}

function request(key: string, overrides: Record<string, unknown> = {}) {
  return {
    customer: { id: CUSTOMER, email: 'ada@example.com', wallet_address: '' },
    items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w' }],
    subscription_ids: ['0193a000-0000-7000-8000-0000000000aa'],
    method: 'card',
    idempotency_key: key,
    return_url: 'https://app.example.com/paid',
    cancel_url: 'https://app.example.com/canceled',
    context: { request_id: 'req-1', ip: '203.0.113.9', actor: `user:${CUSTOMER}` },
    ...overrides,
  }
}

describe.each(DIALECTS)('payment service over mTLS gRPC (%s)', (dialect) => {
  let database: TestDatabase
  let server: PaymentGrpcServer
  let target: string
  let client: PaymentClient
  let provider: TestProvider
  let clock: Date
  const now = () => clock

  beforeEach(async () => {
    clock = new Date('2026-11-22T10:00:00.000Z')
    database = await createTestDatabase(dialect, { database: 'payments' })
    provider = new TestProvider({ db: database.db, logger, now, delayMs: 0, failureRate: 0 })
    const service = new PaymentService({ db: database.db, logger, pricing: () => PRICING, providers: new ProviderRegistry([provider]), now })
    server = new PaymentGrpcServer({
      service,
      logger,
      allowedClients: [CONTROL_PLANE_CLIENT_NAME],
      tls: { ca: fs.readFileSync(pki.caFile), cert: fs.readFileSync(pki.serverCertFile), key: fs.readFileSync(pki.serverKeyFile) },
    })
    target = `127.0.0.1:${await server.listen('127.0.0.1', 0)}`
    client = new PaymentClient({ target, ca: fs.readFileSync(pki.caFile), ...clientFiles(pki, CONTROL_PLANE_CLIENT_NAME), timeoutMs: 5_000 })
  })

  afterEach(async () => {
    client.close()
    await server.close(100)
    await database.destroy()
  })

  const count = async (table: string) => Number(((await database.db(table).count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n)

  it('initiates a payment (pending, priced from the pricing file, audited) and the test provider completes it with a payment.completed event', async () => {
    const { payment, created } = await client.initiatePayment(request('k-1'))
    expect(created).toBe(true)
    expect(payment).toMatchObject({ status: 'pending', method: 'card', provider: 'test', amount_minor: 500, currency: 'USD', customer_id: CUSTOMER })
    expect(payment.items).toEqual([{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w', unit_price_minor: 500 }])
    expect(payment.expires_at).toBe('2026-11-22T10:30:00.000Z')

    expect(await provider.settleDue()).toBe(1)
    const done = await client.getPayment(payment.id, CUSTOMER)
    expect(done.status).toBe('completed')
    expect(done.completed_at).not.toBe('')
    const events = await paymentEvents(database.db, payment.id)
    expect(events.map((e) => e.eventType)).toEqual(['payment.created', 'payment.processing', 'payment.completed'])
    expect(events[0]).toMatchObject({ actor: `${CONTROL_PLANE_CLIENT_NAME}:user:${CUSTOMER}`, requestId: 'req-1', ip: '203.0.113.9' })
    const outbox = (await database.db('outbox').select('subject', 'payload')) as Array<{ subject: string; payload: unknown }>
    expect(outbox.map((o) => o.subject)).toEqual(['payment.completed'])
    const payload = typeof outbox[0]?.payload === 'string' ? JSON.parse(outbox[0].payload) : outbox[0]?.payload
    expect(payload).toMatchObject({ payment_id: payment.id, customer_id: CUSTOMER, status: 'completed', subscription_ids: ['0193a000-0000-7000-8000-0000000000aa'] })
    expect(await count('customers')).toBe(1)
  })

  it('a failure rate of 1 fails every payment (payment.failed), and a terminal payment stays terminal', async () => {
    const { payment } = await client.initiatePayment(request('k-fail'))
    await new TestProvider({ db: database.db, logger, now, delayMs: 0, failureRate: 1 }).settleDue()
    const failed = await client.getPayment(payment.id, null)
    expect(failed).toMatchObject({ status: 'failed', failure_reason: 'declined by the test provider (failure rate)' })
    await expect(client.cancelPayment(payment.id, CUSTOMER, 'changed my mind', { request_id: 'r', ip: '', actor: 'user' })).rejects.toThrow(PaymentPreconditionError)
    expect(((await database.db('outbox').select('subject')) as Array<{ subject: string }>).map((o) => o.subject)).toEqual(['payment.failed'])
  })

  it('the same idempotency key returns the same payment; reused for another request it is ALREADY_EXISTS', async () => {
    const first = await client.initiatePayment(request('k-2'))
    const again = await client.initiatePayment(request('k-2'))
    expect(again).toMatchObject({ created: false, payment: { id: first.payment.id } })
    const [a, b] = await Promise.all([client.initiatePayment(request('k-3')), client.initiatePayment(request('k-3'))])
    expect(a.payment.id).toBe(b.payment.id)
    await expect(client.initiatePayment(request('k-2', { items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }] }))).rejects.toThrow(IdempotencyKeyReusedError)
    expect(await count('payments')).toBe(2)
  })

  it('refuses bad requests with INVALID_ARGUMENT and writes nothing', async () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ method: 'paypal' }, /method must be one of card, crypto/],
      [{ method: 'crypto' }, /crypto_currency is required/],
      [{ method: 'crypto', crypto_currency: 'DOGE' }, /unsupported crypto currency "DOGE"/],
      [{ method: 'crypto', crypto_currency: 'USDT' }, /unsupported crypto currency "USDT"/],
      [{ return_url: 'javascript:alert(1)' }, /return_url must be an absolute http\(s\) URL/],
      [{ cancel_url: '' }, /cancel_url is required/],
      [{ idempotency_key: '' }, /idempotency_key is required/],
      [{ items: [] }, /items must not be empty/],
      [{ items: [{ chain_profile_id: 'bitcoin', node_type: 'full', duration: '1w' }] }, /no price for bitcoin\/full\/1w/],
      [{ items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '2y' }] }, /duration must be one of/],
      [{ customer: { id: 'not-a-user', email: '', wallet_address: '' } }, /customer.id must be the user id/],
      [{ subscription_ids: ['x'] }, /subscription_ids must be UUIDs/],
    ]
    for (const [overrides, message] of bad) {
      const err = await client.initiatePayment(request('k-bad', overrides)).then(() => undefined, (e: unknown) => e)
      expect(err, JSON.stringify(overrides)).toBeInstanceOf(ValidationError)
      expect((err as Error).message).toMatch(message)
    }
    expect(await count('payments')).toBe(0)
    expect(await count('payment_events')).toBe(0)
  })

  it('a crypto payment carries the amount in tokens, the memo and the receiver', async () => {
    const { payment } = await client.initiatePayment(request('k-eth', { method: 'crypto', crypto_currency: 'ETH', items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }] }))
    expect(payment.crypto).toMatchObject({ currency: 'ETH', amount: '0.005000000000000000', amount_base_units: '5000000000000000' })
    expect(payment.crypto?.memo).toBe(`0x${'0'.repeat(32)}${payment.id.replace(/-/g, '')}`)
    expect(payment.crypto?.receiver_address).toMatch(/^0x[0-9a-fA-F]{40}$/)
  })

  it("another customer's payment is NOT_FOUND; cancel moves pending to canceled once", async () => {
    const { payment } = await client.initiatePayment(request('k-4'))
    await expect(client.getPayment(payment.id, OTHER)).rejects.toThrow(NotFoundError)
    await expect(client.getPayment('0193a000-0000-7000-8000-00000000ffff', null)).rejects.toThrow(NotFoundError)
    await expect(client.cancelPayment(payment.id, OTHER, 'x', { request_id: '', ip: '', actor: '' })).rejects.toThrow(NotFoundError)
    const canceled = await client.cancelPayment(payment.id, CUSTOMER, 'changed my mind', { request_id: 'r2', ip: '', actor: `user:${CUSTOMER}` })
    expect(canceled).toMatchObject({ status: 'canceled', failure_reason: 'changed my mind' })
    await expect(client.cancelPayment(payment.id, CUSTOMER, 'again', { request_id: '', ip: '', actor: '' })).rejects.toThrow(ConflictError)
    expect(await provider.settleDue()).toBe(0)
  })

  it('quotes hold 15 minutes; an expired quote is FAILED_PRECONDITION', async () => {
    const quote = await client.getQuote([{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }], null, CUSTOMER)
    expect(quote).toMatchObject({ amount_minor: 1500, currency: 'USD', crypto_amounts: { USDC: '15.000000', ETH: '0.005000000000000000' }, expires_at: '2026-11-22T10:15:00.000Z' })
    const paid = await client.initiatePayment(request('k-q', { quote_id: quote.id, items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }] }))
    expect(paid.payment.amount_minor).toBe(1500)
    clock = new Date('2026-11-22T10:15:00.001Z')
    await expect(client.initiatePayment(request('k-q2', { quote_id: quote.id, items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }] }))).rejects.toThrow(/expired/)
    await expect(client.getQuote([{ chain_profile_id: 'devnet', node_type: 'nope', duration: '1m' }], null, CUSTOMER)).rejects.toThrow(ValidationError)
  })

  it('a crypto payment with a quote pays the quoted token amount, though the rate moved since', async () => {
    let pricing = PRICING
    const service = new PaymentService({ db: database.db, logger, pricing: () => pricing, providers: new ProviderRegistry([provider]), now })
    const items = [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }]
    const quote = await service.getQuote({ items, customer_id: CUSTOMER })
    expect(quote.cryptoAmounts.ETH).toBe('0.005000000000000000')
    const onlyUsdc = await service.getQuote({ items, crypto_currency: 'USDC', customer_id: CUSTOMER })
    // ETH doubles: without a quote the same 15.00 USD is half the ETH.
    pricing = parsePricingConfig({ ...PRICING_SOURCE, crypto: { ...PRICING_SOURCE.crypto, exchange_rates: { USDC: '1.00', ETH: '6000.00' } } })
    const crypto = (key: string, extra: Record<string, unknown> = {}) => service.initiatePayment({ ...request(key, { items, method: 'crypto', crypto_currency: 'ETH', ...extra }) } as never, { actor: `user:${CUSTOMER}` })
    expect((await crypto('k-quoted', { quote_id: quote.id })).payment.crypto).toMatchObject({ currency: 'ETH', amount: '0.005000000000000000', amountBaseUnits: '5000000000000000' })
    expect((await crypto('k-today')).payment.crypto).toMatchObject({ amount: '0.002500000000000000', amountBaseUnits: '2500000000000000' })
    await expect(crypto('k-other-currency', { quote_id: onlyUsdc.id })).rejects.toThrow(`quote ${onlyUsdc.id} has no ETH amount`)
    expect(await database.db('payments').where({ idempotency_key: 'k-other-currency' }).first('id')).toBeUndefined()
  })

  it('a pending payment past its 30-minute session is canceled with payment.canceled', async () => {
    const service = new PaymentService({ db: database.db, logger, pricing: () => PRICING, providers: new ProviderRegistry([provider]), now })
    const { payment } = await client.initiatePayment(request('k-exp'))
    clock = new Date('2026-11-22T10:29:59.000Z')
    expect(await service.expireSessions()).toBe(0)
    clock = new Date('2026-11-22T10:30:00.000Z')
    expect(await service.expireSessions()).toBe(1)
    expect(await client.getPayment(payment.id, CUSTOMER)).toMatchObject({ status: 'canceled', failure_reason: 'session expired' })
    expect(((await database.db('outbox').select('subject')) as Array<{ subject: string }>).map((o) => o.subject)).toEqual(['payment.canceled'])
  })

  it('mTLS refusals: no client certificate, another CA, a common name not allowed, TLS 1.2 — nothing written', async () => {
    const ca = fs.readFileSync(pki.caFile)
    const attempt = async (c: PaymentClient) => {
      try {
        return await c.initiatePayment(request('k-refused')).then(() => undefined, (e: unknown) => e)
      } finally {
        c.close()
      }
    }
    // No client certificate: the handshake is refused before any call.
    const Service = paymentServiceDefinition()
    const bare = new Service(target, grpc.credentials.createSsl(ca), { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' }) as unknown as grpc.Client & {
      GetPaymentMethods(req: object, options: grpc.CallOptions, cb: (err: grpc.ServiceError | null) => void): void
    }
    const noCert = await new Promise<grpc.ServiceError | null>((resolve) => bare.GetPaymentMethods({}, { deadline: Date.now() + 3_000 }, resolve))
    bare.close()
    expect(noCert?.code).toBe(grpc.status.UNAVAILABLE)
    // A certificate from another CA.
    expect(await attempt(new PaymentClient({ target, ca, ...clientFiles(foreignPki, CONTROL_PLANE_CLIENT_NAME), timeoutMs: 3_000 }))).toBeInstanceOf(UnavailableError)
    // Our CA, a name not on the allow-list: PERMISSION_DENIED, reported as a refused control plane.
    const intruder = await attempt(new PaymentClient({ target, ca, ...clientFiles(pki, 'intruder'), timeoutMs: 3_000 }))
    expect(intruder).toBeInstanceOf(UnavailableError)
    expect((intruder as Error).message).toBe('the payment service refused this control plane')
    // TLS 1.2 never completes a handshake.
    const tls12 = await new Promise<Error | undefined>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port: Number(target.split(':')[1]), ca, ...clientFiles(pki, CONTROL_PLANE_CLIENT_NAME), servername: 'localhost', maxVersion: 'TLSv1.2', ALPNProtocols: ['h2'] })
      socket.once('secureConnect', () => {
        socket.destroy()
        resolve(undefined)
      })
      socket.once('error', (err) => resolve(err))
    })
    expect(tls12?.message).toMatch(/protocol version|alert/i)
    expect(await count('payments')).toBe(0)
  })

  it('serves grpc.health.v1.Health (SERVING) and lists the methods of the enabled providers', async () => {
    const definition = protoLoader.loadSync(healthProtoPath, { keepCase: true, defaults: true, enums: String })
    const Health = (grpc.loadPackageDefinition(definition) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } }).grpc.health.v1.Health
    const files = clientFiles(pki, CONTROL_PLANE_CLIENT_NAME)
    const health = new Health(target, grpc.credentials.createSsl(fs.readFileSync(pki.caFile), files.key, files.cert), { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' }) as unknown as grpc.Client & {
      Check(req: { service: string }, cb: (err: grpc.ServiceError | null, res: { status: string }) => void): void
    }
    const status = await new Promise<string>((resolve, reject) => health.Check({ service: 'nodeplane.payments.v1.PaymentService' }, (err, res) => (err ? reject(err) : resolve(res.status))))
    expect(status).toBe('SERVING')
    health.close()
    expect(await client.methods()).toEqual(['card', 'crypto'])
  })

  it('UNAVAILABLE: a provider that cannot set the payment up says so and asks for a new key; a service that is gone asks to retry later', async () => {
    // The card processor's API is not reachable (the official SDK against a closed port).
    const card = new CardProvider({ db: database.db, logger, now, secretKey: 'sk_test_unreachable', webhookSecret: 'whsec_unused', apiUrl: `http://127.0.0.1:${await freePort()}`, maxNetworkRetries: 0, timeoutMs: 1_000 })
    const service = new PaymentService({ db: database.db, logger, pricing: () => PRICING, providers: new ProviderRegistry([card]), now })
    const cardServer = new PaymentGrpcServer({
      service,
      logger,
      allowedClients: [CONTROL_PLANE_CLIENT_NAME],
      tls: { ca: fs.readFileSync(pki.caFile), cert: fs.readFileSync(pki.serverCertFile), key: fs.readFileSync(pki.serverKeyFile) },
    })
    const cardTarget = `127.0.0.1:${await cardServer.listen('127.0.0.1', 0)}`
    const cardClient = new PaymentClient({ target: cardTarget, ca: fs.readFileSync(pki.caFile), ...clientFiles(pki, CONTROL_PLANE_CLIENT_NAME), timeoutMs: 5_000 })
    try {
      const refused = await cardClient.initiatePayment(request('k-down')).catch((err: unknown) => err)
      expect(refused).toBeInstanceOf(UnavailableError)
      const failed = (await database.db('payments').where({ idempotency_key: 'k-down' }).first('id', 'status')) as { id: string; status: string }
      expect(failed.status).toBe('failed')
      expect(refused).toMatchObject({ message: 'payment provider card is unavailable', details: `payment ${failed.id} was marked failed; retry with a new idempotency_key` })

      await cardServer.close(100)
      const gone = await cardClient.initiatePayment(request('k-gone')).catch((err: unknown) => err)
      expect(gone).toBeInstanceOf(UnavailableError)
      expect(gone).toMatchObject({ message: 'the payment service is unavailable', details: 'retry later' })
    } finally {
      cardClient.close()
      await cardServer.close(100)
    }
  })
})
