/**
 * The payment service daemon (`startPaymentService`) as configured from settings, on both
 * databases (issue 15, items 8, 10 and 11): which provider takes which method, /readyz per
 * provider, the reconciliation and purge jobs, and the payments database's CHECK constraints.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { pricingFile, paymentServiceConfigProblems, startPaymentService, type PaymentServiceSettings, type RunningPaymentService } from '../../../daemons/payment-service.js'
import { loadConfig, paymentServiceEnv, upEnv } from '../../../src/config/env.js'
import type { Db } from '../../../src/db/knex.js'
import { ConfigError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { PaymentPreconditionError } from '../../../src/payments/errors.js'
import { loadPricingConfig } from '../../../src/payments/pricing.js'
import { paymentProvidersFromSettings } from '../../../src/payments/providers/index.js'
import { TestProvider } from '../../../src/payments/providers/test.js'
import { TEST_PROVIDER_WARNING } from '../../../src/payments/provider-health.js'
import { findPayment } from '../../../src/payments/store.js'
import * as initialSchema from '../../../migrations/payments/0001_initial_schema.js'
import * as providersSchema from '../../../migrations/payments/0002_providers.js'
import * as guards from '../../../migrations/payments/0003_guards.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type Dialect } from '../../helpers/db.js'
import { FakeCardProcessor } from '../../helpers/fake-card-processor.js'
import { paymentServiceSettings } from '../../helpers/payment-stack.js'
import { LogCapture, Resources } from '../http/harness.js'

const SECRET_KEY = `sk_test_${crypto.randomBytes(12).toString('hex')}`
const WEBHOOK_SECRET = `whsec_${crypto.randomBytes(24).toString('base64')}`
const address = () => `0x${crypto.randomBytes(20).toString('hex')}`
const logger = createLogger({ level: 'silent' })

class Clock {
  private at = Date.now()
  readonly now = (): Date => new Date(this.at)
  advance(ms: number): void {
    this.at += ms
  }
}

/**
 * A JSON-RPC endpoint that knows the chain id and head, and fails every other call: the watcher
 * never finishes a poll. `refuse()` makes it answer every request 401 from then on, as a hosted
 * RPC does when the API key in its URL is revoked.
 */
async function stuckRpc(): Promise<{ url: string; refuse(): void; close(): Promise<void> }> {
  let refusing = false
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (refusing) {
        res.writeHead(401, { 'content-type': 'text/plain' }).end('invalid project id')
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: number; method: string } | Array<{ id: number; method: string }>
      const answer = (call: { id: number; method: string }) => {
        if (call.method === 'eth_chainId') return { jsonrpc: '2.0', id: call.id, result: '0x539' }
        if (call.method === 'eth_blockNumber') return { jsonrpc: '2.0', id: call.id, result: '0x64' }
        return { jsonrpc: '2.0', id: call.id, error: { code: -32000, message: 'node is syncing' } }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(Array.isArray(body) ? body.map(answer) : answer(body)))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    refuse: () => {
      refusing = true
    },
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

async function readyz(service: RunningPaymentService): Promise<{ status: number; body: { status: string; details?: string; components: Record<string, { status: string; error?: string; warning?: string; methods?: string[] }> } }> {
  const res = await fetch(`${service.httpUrl}/readyz`)
  return { status: res.status, body: (await res.json()) as never }
}

async function rows(db: Db, table: string): Promise<number> {
  return Number(((await db(table).count({ n: '*' }).first()) as { n: number | string }).n)
}

describe.each(DIALECTS)('payment service daemon on %s', (dialect: Dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function start(overrides: Partial<PaymentServiceSettings>, clock = new Clock(), log = logger) {
    const t = await createTestDatabase(dialect, { database: 'payments' })
    resources.add(() => t.destroy())
    const settings = paymentServiceSettings(tempDir('nodeplane-payment-service-'), overrides)
    const service = await startPaymentService(settings, { db: t.db, logger: log, now: clock.now })
    resources.add(() => service.stop())
    return { db: t.db, service, clock }
  }

  async function processor(clock: Clock) {
    const fake = await FakeCardProcessor.start({ secretKey: SECRET_KEY, now: clock.now })
    resources.add(() => fake.close())
    return fake
  }

  const card = (fake: FakeCardProcessor): Partial<PaymentServiceSettings> => ({
    CARD_PROVIDER_ENABLED: true,
    CARD_PROVIDER_SECRET_KEY: SECRET_KEY,
    CARD_PROVIDER_WEBHOOK_SECRET: WEBHOOK_SECRET,
    CARD_PROVIDER_API_URL: fake.url,
  })

  const customer = crypto.randomUUID()
  const request = (method: string, key: string) => ({
    customer: { id: customer },
    items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w' }],
    method,
    ...(method === 'crypto' ? { crypto_currency: 'USDC' } : {}),
    idempotency_key: key,
    return_url: 'https://app.example.test/done',
    cancel_url: 'https://app.example.test/canceled',
  })

  describe('each provider takes only its methods (item 8)', () => {
    it('as `nodeplane up` leaves it (PAYMENT_TEST_PROVIDER_ENABLED unset), the card provider on: no test provider; crypto is refused and nothing is written', async () => {
      const clock = new Clock()
      const fake = await processor(clock)
      // What `nodeplane up` parses from an environment that turns the card provider on.
      const up = loadConfig(upEnv, { NODEPLANE_DATA_DIR: tempDir('nodeplane-payment-env-'), CARD_PROVIDER_ENABLED: 'true' })
      const { db, service } = await start({ PAYMENT_TEST_PROVIDER_ENABLED: up.PAYMENT_TEST_PROVIDER_ENABLED, ...card(fake) }, clock)
      expect(service.service.methods()).toEqual(['card'])
      const refused = await service.service.initiatePayment(request('crypto', 'crypto-1'), { actor: 'test' }).catch((err: unknown) => err)
      expect(refused).toBeInstanceOf(PaymentPreconditionError)
      expect((refused as Error).message).toBe('no payment provider is enabled for method crypto')
      expect(await rows(db, 'payments')).toBe(0)
      const ready = await readyz(service)
      expect(ready.status).toBe(200)
      expect(Object.keys(ready.body.components).sort()).toEqual(['database', 'provider:card'])
    })

    it('the settings: unset under up means on only without a real provider; the daemon defaults to off; both on for one method is refused', () => {
      const base = { NODEPLANE_DATA_DIR: tempDir('nodeplane-payment-env-') }
      expect(loadConfig(upEnv, { ...base, CARD_PROVIDER_ENABLED: 'true' }).PAYMENT_TEST_PROVIDER_ENABLED).toBeUndefined()
      expect(loadConfig(paymentServiceEnv, base).PAYMENT_TEST_PROVIDER_ENABLED).toBe(false)
      expect(loadConfig(paymentServiceEnv, { ...base, PAYMENT_TEST_PROVIDER_METHODS: 'crypto, crypto' }).PAYMENT_TEST_PROVIDER_METHODS).toEqual(['crypto'])
      expect(() => loadConfig(paymentServiceEnv, { ...base, PAYMENT_TEST_PROVIDER_METHODS: 'card,paypal' })).toThrow(/PAYMENT_TEST_PROVIDER_METHODS.*must name one or more of card, crypto/)

      const context = { db: undefined as unknown as Db, logger, now: () => new Date() }
      const pricing = loadPricingConfig(pricingFile({}))
      const names = (overrides: Partial<PaymentServiceSettings>) =>
        paymentProvidersFromSettings({ ...paymentServiceSettings(base.NODEPLANE_DATA_DIR), ...overrides }, context, pricing).map((p) => `${p.name}:${p.methods.join('+')}`)
      const cardOn = { CARD_PROVIDER_ENABLED: true, CARD_PROVIDER_SECRET_KEY: SECRET_KEY, CARD_PROVIDER_WEBHOOK_SECRET: WEBHOOK_SECRET }
      expect(names({ PAYMENT_TEST_PROVIDER_ENABLED: undefined })).toEqual(['test:card+crypto'])
      expect(names({ PAYMENT_TEST_PROVIDER_ENABLED: undefined, ...cardOn })).toEqual(['card:card'])
      expect(names({ PAYMENT_TEST_PROVIDER_ENABLED: true, PAYMENT_TEST_PROVIDER_METHODS: ['crypto'], ...cardOn })).toEqual(['card:card', 'test:crypto'])
      const settings = { ...paymentServiceSettings(base.NODEPLANE_DATA_DIR), PAYMENT_TEST_PROVIDER_ENABLED: true, ...cardOn }
      expect(() => paymentProvidersFromSettings(settings, context, pricing)).toThrow(ConfigError)
      expect(paymentServiceConfigProblems(settings, logger)).toEqual([
        'PAYMENT_TEST_PROVIDER_METHODS: card is taken by the card provider (CARD_PROVIDER_ENABLED=true); list only methods no real provider takes, e.g. PAYMENT_TEST_PROVIDER_METHODS=crypto, or turn the test provider off',
      ])
    })

    it('enabled explicitly for crypto beside the card provider: crypto goes to the test provider, card to the card provider, and /readyz says the test provider is on', async () => {
      const clock = new Clock()
      const fake = await processor(clock)
      const { db, service } = await start({ PAYMENT_TEST_PROVIDER_ENABLED: true, PAYMENT_TEST_PROVIDER_METHODS: ['crypto'], ...card(fake) }, clock)
      const cardPayment = (await service.service.initiatePayment(request('card', 'card-1'), { actor: 'test' })).payment
      const cryptoPayment = (await service.service.initiatePayment(request('crypto', 'crypto-1'), { actor: 'test' })).payment
      expect([cardPayment.provider, cryptoPayment.provider]).toEqual(['card', 'test'])
      const ready = await readyz(service)
      expect(ready.status).toBe(200)
      expect(ready.body.components['provider:test']).toEqual({ status: 'up', methods: ['crypto'], warning: TEST_PROVIDER_WARNING })
      expect(ready.body.components['provider:card']).toEqual({ status: 'up', methods: ['card'] })

      // A test provider for crypto only leaves a card payment it holds (an earlier configuration's) alone.
      const { payment: held } = await service.service.initiatePayment(request('crypto', 'crypto-2'), { actor: 'test' })
      await db('payments').where({ id: held.id }).update({ method: 'card', crypto_currency: null, crypto_amount: null, crypto_amount_base_units: null, crypto_memo: null })
      clock.advance(60_000)
      await new TestProvider({ db, logger, now: clock.now, methods: ['crypto'], delayMs: 0, failureRate: 0 }).settleDue()
      expect((await findPayment(db, held.id))?.status).toBe('pending')
      expect((await findPayment(db, cryptoPayment.id))?.status).toBe('completed')
    })
  })

  describe('/readyz reports each provider (item 10)', () => {
    it('card: ready while the processor answers; 503 naming provider:card when it is gone', async () => {
      const clock = new Clock()
      const fake = await processor(clock)
      const { service } = await start({ PAYMENT_TEST_PROVIDER_ENABLED: false, ...card(fake) }, clock)
      expect((await readyz(service)).status).toBe(200)
      await fake.close()
      const down = await readyz(service)
      expect(down.status).toBe(503)
      expect(down.body.details).toMatch(/^provider:card: the card processor is unreachable/)
      expect(down.body.components['provider:card']).toMatchObject({ status: 'down', methods: ['card'] })
      expect(JSON.stringify(down.body)).not.toContain(SECRET_KEY)
    })

    it('crypto: 503 naming provider:crypto when the watcher has finished no poll for ten poll intervals, and when the chain is stopped', async () => {
      const rpc = await stuckRpc()
      resources.add(() => rpc.close())
      const clock = new Clock()
      const { service } = await start(
        {
          PAYMENT_TEST_PROVIDER_ENABLED: false,
          CRYPTO_PROVIDER_ENABLED: true,
          CRYPTO_RPC_URL: rpc.url,
          CRYPTO_RECEIVER_ADDRESS: address(),
          CRYPTO_TOKEN_CONTRACTS: `USDC=${address()},USDT=${address()},ETH=${address()}`,
          CRYPTO_POLL_INTERVAL: 5_000,
          CRYPTO_CONFIRMATIONS: 1,
        },
        clock,
      )
      const ready = await readyz(service)
      expect(ready.status).toBe(200)
      expect(ready.body.components['provider:crypto']).toEqual({ status: 'up', methods: ['crypto'] })
      clock.advance(61_000)
      const lagging = await readyz(service)
      expect(lagging.status).toBe(503)
      expect(lagging.body.details).toMatch(/^provider:crypto: the crypto watcher is lagging: no poll has finished since the service started \(61 s, limit 60 s\)/)
      await rpc.close()
      const stopped = await readyz(service)
      expect(stopped.status).toBe(503)
      expect(stopped.body.details).toMatch(/^provider:crypto: /)
      expect(stopped.body.components['provider:crypto']?.error).not.toMatch(/lagging/)
    })

    it('crypto: an RPC refusing its API key is named without the RPC URL (the key is in it) in the answer', async () => {
      const rpc = await stuckRpc()
      resources.add(() => rpc.close())
      const apiKey = crypto.randomBytes(16).toString('hex')
      const { service } = await start({
        PAYMENT_TEST_PROVIDER_ENABLED: false,
        CRYPTO_PROVIDER_ENABLED: true,
        CRYPTO_RPC_URL: `${rpc.url}/v3/${apiKey}`,
        CRYPTO_RECEIVER_ADDRESS: address(),
        CRYPTO_TOKEN_CONTRACTS: `USDC=${address()},USDT=${address()},ETH=${address()}`,
        CRYPTO_POLL_INTERVAL: 5_000,
        CRYPTO_CONFIRMATIONS: 1,
      })
      expect((await readyz(service)).status).toBe(200)
      rpc.refuse()
      const refused = await readyz(service)
      expect(refused.status).toBe(503)
      expect(refused.body.details).toMatch(/^provider:crypto: crypto RPC: server response 401/)
      expect(JSON.stringify(refused.body)).not.toContain(apiKey)
    })
  })

  describe('jobs', () => {
    it('reconciliation (item 4) runs as a job: a paid session whose webhook was dropped is completed by a tick', async () => {
      const clock = new Clock()
      const fake = await processor(clock)
      const { db, service } = await start({ PAYMENT_TEST_PROVIDER_ENABLED: false, ...card(fake) }, clock)
      const { payment } = await service.service.initiatePayment(request('card', 'card-dropped'), { actor: 'test' })
      fake.complete(payment.providerReference as string)
      clock.advance(31 * 60_000)
      expect(await service.jobs.reconciliation.tick()).toBe(true)
      expect((await findPayment(db, payment.id))?.status).toBe('completed')
    })

    it('provider_events (item 11) are purged once older than PAYMENT_PROVIDER_EVENT_RETENTION', async () => {
      const clock = new Clock()
      const { db, service } = await start({ PAYMENT_PROVIDER_EVENT_RETENTION: 3 * 86_400_000 }, clock)
      const at = (ms: number) => new Date(clock.now().getTime() - ms)
      await db('provider_events').insert([
        { provider: 'card', event_id: 'evt_old', event_type: 'checkout.session.completed', payment_id: null, processed_at: at(3 * 86_400_000 + 1_000) },
        { provider: 'card', event_id: 'evt_recent', event_type: 'checkout.session.completed', payment_id: null, processed_at: at(3 * 86_400_000 - 60_000) },
      ])
      expect(await service.jobs.providerEventsPurge.tick()).toBe(true)
      expect(((await db('provider_events').select('event_id')) as Array<{ event_id: string }>).map((r) => r.event_id)).toEqual(['evt_recent'])
    })
  })

  describe('provider errors in logs and the database', () => {
    it('crypto: an RPC refusing its API key during session expiry leaves the key out of payment_retries and of every log line', async () => {
      const rpc = await stuckRpc()
      resources.add(() => rpc.close())
      const apiKey = crypto.randomBytes(16).toString('hex')
      const logs = new LogCapture()
      const lines = logs.raw
      const captured = createLogger({ level: 'debug', destination: logs })
      const clock = new Clock()
      const { db, service } = await start(
        {
          PAYMENT_TEST_PROVIDER_ENABLED: false,
          CRYPTO_PROVIDER_ENABLED: true,
          CRYPTO_RPC_URL: `${rpc.url}/v3/${apiKey}`,
          CRYPTO_RECEIVER_ADDRESS: address(),
          CRYPTO_TOKEN_CONTRACTS: `USDC=${address()},USDT=${address()},ETH=${address()}`,
          CRYPTO_POLL_INTERVAL: 100,
          CRYPTO_CONFIRMATIONS: 1,
        },
        clock,
        captured,
      )
      const { payment } = await service.service.initiatePayment(request('crypto', 'crypto-revoked-key'), { actor: 'test' })
      // How far the watcher got before the key was revoked: expiry asks the RPC for this block's time.
      await db('crypto_watch_cursors').insert({ chain: 'evm:1337', last_confirmed_block: 90, last_confirmed_block_hash: `0x${'ab'.repeat(32)}`, updated_at: clock.now() })
      rpc.refuse()
      clock.advance(payment.expiresAt.getTime() - clock.now().getTime() + 60_000)
      expect(await service.jobs.expiry.tick()).toBe(true)
      expect((await findPayment(db, payment.id))?.status).toBe('pending')
      const retries = (await db('payment_retries').where({ payment_id: payment.id }).select()) as Array<{ job: string; last_error: string }>
      expect(retries.map((r) => r.job)).toEqual(['expiry'])
      expect(retries[0]?.last_error).toMatch(/could not close the payment's session/)
      expect(JSON.stringify(retries)).not.toContain(apiKey)

      const deadline = Date.now() + 10_000
      while (!lines.some((l) => l.includes('crypto watcher poll failed') && l.includes('401')) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
      expect(lines.filter((l) => l.includes('crypto watcher poll failed') && l.includes('401')).length).toBeGreaterThan(0)
      expect(lines.filter((l) => l.includes('could not close the session at the provider') && l.includes('server response 401'))).toHaveLength(1)
      expect(lines.filter((l) => l.includes('could not expire the payment'))).toHaveLength(1)
      expect(lines.join('')).not.toContain(apiKey)
    })
  })

  describe('CHECK constraints (item 11)', () => {
    const good = (id: string, customerId: string) => ({
      id,
      customer_id: customerId,
      status: 'pending',
      method: 'card',
      provider: 'card',
      amount_minor: 1500,
      currency: 'USD',
      idempotency_key: `k-${id}`,
      subscription_ids: '[]',
      return_url: 'https://a.test',
      cancel_url: 'https://a.test',
      expires_at: new Date(),
      version: 1,
      created_at: new Date(),
      updated_at: new Date(),
    })

    it('refuse an unknown status or method, an amount of zero or less, and an unknown currency; a valid row is taken', async () => {
      const t = await createTestDatabase(dialect, { database: 'payments' })
      resources.add(() => t.destroy())
      const customerId = crypto.randomUUID()
      await t.db('customers').insert({ id: customerId, created_at: new Date(), updated_at: new Date() })
      const bad: Array<Record<string, unknown>> = [
        { status: 'paid' },
        { method: 'paypal' },
        { amount_minor: 0 },
        { amount_minor: -1500 },
        { currency: 'usd' },
        { currency: 'US1' },
        { currency: 'USDX' },
        { crypto_currency: 'DOGE' },
      ]
      for (const change of bad) {
        const error = await t.db('payments').insert({ ...good(crypto.randomUUID(), customerId), ...change }).catch((err: unknown) => err)
        expect({ change, error: String(error) }).toEqual({ change, error: expect.stringMatching(/check constraint/i) })
      }
      expect(await rows(t.db, 'payments')).toBe(0)
      const id = crypto.randomUUID()
      await t.db('payments').insert({ ...good(id, customerId), crypto_currency: 'USDC' })
      await expect(t.db('payments').where({ id }).update({ status: 'done' })).rejects.toThrow(/check constraint/i)
      const line = { payment_id: id, position: 0, chain_profile_id: 'devnet', node_type: 'full', duration: '1w', currency: 'USD', created_at: new Date() }
      await expect(t.db('payment_line_items').insert({ ...line, id: crypto.randomUUID(), unit_price_minor: 0 })).rejects.toThrow(/check constraint/i)
      await t.db('payment_line_items').insert({ ...line, id: crypto.randomUUID(), unit_price_minor: 1500 })
      // The rebuilt SQLite table kept its indexes and the line items' cascade.
      await expect(t.db('payments').insert({ ...good(crypto.randomUUID(), customerId), idempotency_key: `k-${id}` })).rejects.toThrow(/unique|duplicate/i)
      await t.db('payments').where({ id }).delete()
      expect(await rows(t.db, 'payment_line_items')).toBe(0)
    })

    it('the migration refuses a database holding rows that break them, naming the table, and changes nothing', async () => {
      const t = await createTestDatabase(dialect, { database: 'payments', migrated: false })
      resources.add(() => t.destroy())
      await initialSchema.up(t.db)
      await providersSchema.up(t.db)
      const customerId = crypto.randomUUID()
      await t.db('customers').insert({ id: customerId, created_at: new Date(), updated_at: new Date() })
      await t.db('payments').insert({ ...good(crypto.randomUUID(), customerId), amount_minor: 0 })
      await expect(guards.up(t.db)).rejects.toThrow(/payments: 1 row\(s\) break payments_amount_positive/)
      expect(await t.db.schema.hasTable('payment_retries')).toBe(false)
    })
  })
})
