import crypto from 'node:crypto'
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BusMessage, BusSubscription, EventBus } from '../../src/events/bus.js'
import { connectNatsBus } from '../../src/events/nats-bus.js'
import { createLogger } from '../../src/log.js'
import { PaymentClient } from '../../src/payments/client.js'
import { TEST_PROVIDER_WARNING } from '../../src/payments/providers/test-provider-warning.js'
import type { PaymentEvent } from '../../src/payments/events.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { FakeCardProcessor, signedDelivery } from '../helpers/fake-card-processor.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'
import { cardPaymentRequest } from '../helpers/payment-requests.js'

const SECRET_KEY = `sk_test_e2e_${crypto.randomBytes(12).toString('hex')}`
const WEBHOOK_SECRET = `whsec_e2e_${crypto.randomBytes(12).toString('hex')}`
const INTRUDER = 'billing-reports'

interface CertsResult {
  dir: string
  ca_file: string
  server_cert_file: string
  server_key_file: string
  clients: Array<{ name: string; cert_file: string; key_file: string }>
}

/** The one `Error: …` line a refused start prints, and every stderr line. */
function refusal(result: CliResult): { errorLines: string[]; lines: string[] } {
  const lines = result.stderr.split('\n').filter((l) => l.trim().length > 0)
  return { errorLines: lines.filter((l) => l.startsWith('Error:')), lines }
}

function metricValue(text: string, status: string): number | undefined {
  const line = text.split('\n').find((l) => /^payments\{/.test(l) && l.includes(`status="${status}"`))
  return line === undefined ? undefined : Number(line.split(' ').at(-1))
}

describe('nodeplane daemon payment-service (separate process, NATS, card provider against a fake processor)', () => {
  let nats: NatsServer
  let certs: CertsResult
  let certDir: string
  let fake: FakeCardProcessor
  let bus: EventBus

  const client = (name: string, port: number) => {
    const files = certs.clients.find((c) => c.name === name)
    if (!files) throw new Error(`no client certificate ${name}`)
    return new PaymentClient({
      target: `127.0.0.1:${port}`,
      ca: fs.readFileSync(certs.ca_file),
      cert: fs.readFileSync(files.cert_file),
      key: fs.readFileSync(files.key_file),
      timeoutMs: 10_000,
    })
  }

  beforeAll(async () => {
    nats = await startNats()
    certDir = tempDir('nodeplane-payment-certs-')
    const made = await nodeplane(['certs', 'dev', '--dir', certDir, '--client', 'nodeplane-control-plane', '--client', INTRUDER, '--json'])
    expect(made.exitCode, made.stderr).toBe(0)
    certs = JSON.parse(made.stdout) as CertsResult
    fake = await FakeCardProcessor.start({ secretKey: SECRET_KEY })
    bus = await connectNatsBus({ url: nats.url, logger: createLogger({ level: 'silent' }), name: 'e2e-payment-watcher' })
  })

  afterAll(async () => {
    await bus?.close()
    await fake?.close()
    await nats?.destroy()
    if (certDir) fs.rmSync(certDir, { recursive: true, force: true })
  })

  const baseEnv = (database: TestDatabase, dataDir: string): Record<string, string> => ({
    NODEPLANE_DATA_DIR: dataDir,
    PAYMENTS_DATABASE_URL: database.url,
    NATS_URL: nats.url,
    PAYMENT_TLS_CA_FILE: certs.ca_file,
    PAYMENT_TLS_CERT_FILE: certs.server_cert_file,
    PAYMENT_TLS_KEY_FILE: certs.server_key_file,
  })

  for (const dialect of DIALECTS) {
    it(`${dialect}: health, metrics, card payment over mTLS gRPC, signed webhook -> payment.completed on JetStream; foreign CN refused; SIGTERM exits 143`, { timeout: 90_000 }, async () => {
      const database = await createTestDatabase(dialect, { database: 'payments', migrated: true })
      const dataDir = tempDir()
      const ports = { grpc: await freePort(), http: await freePort(), metrics: await freePort() }
      const received: PaymentEvent[] = []
      let subscription: BusSubscription | undefined
      let controlPlane: PaymentClient | undefined
      let intruder: PaymentClient | undefined
      const child = spawnNodeplane(['daemon', 'payment-service'], {
        env: {
          ...baseEnv(database, dataDir),
          PAYMENT_GRPC_PORT: String(ports.grpc),
          PAYMENT_HTTP_PORT: String(ports.http),
          PAYMENT_METRICS_PORT: String(ports.metrics),
          CARD_PROVIDER_ENABLED: 'true',
          CARD_PROVIDER_SECRET_KEY: SECRET_KEY,
          CARD_PROVIDER_WEBHOOK_SECRET: WEBHOOK_SECRET,
          CARD_PROVIDER_API_URL: fake.url,
        },
      })
      try {
        const httpUrl = `http://127.0.0.1:${ports.http}`
        const metricsUrl = `http://127.0.0.1:${ports.metrics}/metrics`
        await waitFor(async () => (await fetch(`${httpUrl}/health`)).status === 200, 'payment-service /health', 30_000)
        const ready = await fetch(`${httpUrl}/readyz`)
        expect(ready.status).toBe(200)

        const metricsBefore = await (await fetch(metricsUrl)).text()
        expect(metricsBefore).toMatch(/^payments\{[^}]*status="pending"[^}]*\} 0$/m)
        for (const status of ['processing', 'completed', 'failed', 'canceled']) expect(metricValue(metricsBefore, status), status).toBe(0)

        subscription = await bus.subscribe({ durable: `e2e-payment-${dialect}-${crypto.randomBytes(4).toString('hex')}`, subject: 'payment.*' }, async (m: BusMessage) => {
          received.push(JSON.parse(Buffer.from(m.data).toString('utf8')) as PaymentEvent)
          m.ack()
        })

        controlPlane = client('nodeplane-control-plane', ports.grpc)
        expect(await controlPlane.methods()).toContain('card')
        const customerId = crypto.randomUUID()
        const { payment, created } = await controlPlane.initiatePayment(cardPaymentRequest(customerId))
        expect(created).toBe(true)
        expect(payment).toMatchObject({ status: 'pending', method: 'card', provider: 'card', amount_minor: 500, currency: 'USD' })
        expect(payment.checkout_url).toMatch(/^https:\/\/checkout\.example\.test\//)
        const session = [...fake.sessions.values()].find((s) => s.client_reference_id === payment.id)
        expect(session, 'a checkout session at the processor for the payment').toBeDefined()
        expect(session?.amount_total).toBe(500)
        expect(metricValue(await (await fetch(metricsUrl)).text(), 'pending')).toBe(1)

        // A delivery whose signature is made with another secret is refused, and moves nothing.
        const paid = fake.complete(session?.id as string)
        const forged = signedDelivery(paid, 'checkout.session.completed', { secret: 'whsec_not_ours', timestamp: Math.floor(Date.now() / 1000) })
        const refused = await fetch(`${httpUrl}/webhooks/card-provider`, { method: 'POST', headers: { 'content-type': 'application/json', 'Provider-Signature': forged.signature }, body: forged.payload })
        expect(refused.status).toBe(401)
        expect(await refused.json()).toMatchObject({ error: 'invalid signature' })
        const unsigned = await fetch(`${httpUrl}/webhooks/card-provider`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: forged.payload })
        expect(unsigned.status).toBe(401)
        expect((await controlPlane.getPayment(payment.id, customerId)).status).toBe('pending')

        const delivery = signedDelivery(paid, 'checkout.session.completed', { secret: WEBHOOK_SECRET, timestamp: Math.floor(Date.now() / 1000) })
        const accepted = await fetch(`${httpUrl}/webhooks/card-provider`, { method: 'POST', headers: { 'content-type': 'application/json', 'Provider-Signature': delivery.signature }, body: delivery.payload })
        expect(accepted.status).toBe(200)
        expect(await accepted.json()).toEqual({ status: 'ok', outcome: 'completed' })
        const again = await fetch(`${httpUrl}/webhooks/card-provider`, { method: 'POST', headers: { 'content-type': 'application/json', 'Provider-Signature': delivery.signature }, body: delivery.payload })
        expect(await again.json()).toEqual({ status: 'ok', outcome: 'duplicate' })

        const event = await waitFor(async () => received.find((e) => e.payment_id === payment.id), 'payment.completed on JetStream', 20_000)
        expect(event).toMatchObject({ payment_id: payment.id, customer_id: customerId, status: 'completed', method: 'card', amount_minor: 500, currency: 'USD' })
        expect((await controlPlane.getPayment(payment.id, customerId)).status).toBe('completed')
        const metricsAfter = await (await fetch(metricsUrl)).text()
        expect(metricValue(metricsAfter, 'completed')).toBe(1)
        expect(metricValue(metricsAfter, 'pending')).toBe(0)
        // The duplicate delivery published nothing more.
        await new Promise((r) => setTimeout(r, 500))
        expect(received.filter((e) => e.payment_id === payment.id)).toHaveLength(1)

        // A certificate from the same CA, but a common name not in PAYMENT_ALLOWED_CLIENTS.
        intruder = client(INTRUDER, ports.grpc)
        await expect(intruder.methods()).rejects.toThrow(/refused this control plane/)
        await expect(intruder.getPayment(payment.id, customerId)).rejects.toThrow(/refused/)
      } finally {
        controlPlane?.close()
        intruder?.close()
        await subscription?.close()
        child.kill('SIGTERM')
      }
      const started = Date.now()
      const result = await child
      const stoppedMs = Date.now() - started
      try {
        expect(result.exitCode).toBe(143)
        expect(stoppedMs).toBeLessThan(10_000)
        const lines = jsonLogLines(result.all)
        expect(lines.some((l) => l.msg === 'ready')).toBe(true)
        expect(lines.every((l) => l.daemon === 'payment-service')).toBe(true)
        expect(String(result.all)).not.toContain(SECRET_KEY)
        expect(String(result.all)).not.toContain(WEBHOOK_SECRET)
      } finally {
        await database.destroy()
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    })
  }

  describe('refuses to start on bad configuration, with one line naming the variables', () => {
    let database: TestDatabase
    let dataDir: string
    beforeAll(async () => {
      database = await createTestDatabase('sqlite', { database: 'payments', migrated: true })
      dataDir = tempDir()
    })
    afterAll(async () => {
      await database?.destroy()
      if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true })
    })

    const start = async (env: Record<string, string>) => {
      const ports = { PAYMENT_GRPC_PORT: String(await freePort()), PAYMENT_HTTP_PORT: String(await freePort()), PAYMENT_METRICS_PORT: String(await freePort()) }
      return nodeplane(['daemon', 'payment-service'], { env: { ...ports, ...env } })
    }

    it('no provider enabled', async () => {
      const result = await start(baseEnv(database, dataDir))
      expect(result.exitCode).toBe(78)
      const { errorLines } = refusal(result)
      expect(errorLines).toHaveLength(1)
      expect(errorLines[0]).toMatch(/PAYMENT_TEST_PROVIDER_ENABLED.*CARD_PROVIDER_ENABLED.*CRYPTO_PROVIDER_ENABLED/)
    })

    it('CARD_PROVIDER_ENABLED=true without its secrets names both; a secret given is never echoed', async () => {
      const none = await start({ ...baseEnv(database, dataDir), CARD_PROVIDER_ENABLED: 'true' })
      expect(none.exitCode).toBe(78)
      const { errorLines } = refusal(none)
      expect(errorLines).toHaveLength(1)
      expect(errorLines[0]).toContain('CARD_PROVIDER_SECRET_KEY')
      expect(errorLines[0]).toContain('CARD_PROVIDER_WEBHOOK_SECRET')

      const half = await start({ ...baseEnv(database, dataDir), CARD_PROVIDER_ENABLED: 'true', CARD_PROVIDER_SECRET_KEY: SECRET_KEY })
      expect(half.exitCode).toBe(78)
      expect(refusal(half).errorLines).toHaveLength(1)
      expect(refusal(half).errorLines[0]).toContain('CARD_PROVIDER_WEBHOOK_SECRET')
      expect(half.stdout + half.stderr).not.toContain(SECRET_KEY)
    })

    it('pending migrations on the payments database', async () => {
      const empty = await createTestDatabase('sqlite', { database: 'payments', migrated: false })
      try {
        const result = await start({ ...baseEnv(empty, dataDir), PAYMENT_TEST_PROVIDER_ENABLED: 'true' })
        expect(result.exitCode).toBe(69)
        const { errorLines, lines } = refusal(result)
        expect(errorLines).toHaveLength(1)
        expect(errorLines[0]).toMatch(/payments database has \d+ pending migration/)
        expect(lines.join('\n')).toContain('nodeplane db migrate')
      } finally {
        await empty.destroy()
      }
    })

    it('warns at start, before connecting, when the test provider is on (never when only a real provider is)', async () => {
      // The unmigrated database stops the start right after the settings are checked (exit 69).
      const empty = await createTestDatabase('sqlite', { database: 'payments', migrated: false })
      const warning = (result: CliResult) => jsonLogLines(result.stdout).filter((l) => l.msg === TEST_PROVIDER_WARNING)
      try {
        const test = await start({ ...baseEnv(empty, dataDir), PAYMENT_TEST_PROVIDER_ENABLED: 'true', PAYMENT_TEST_PROVIDER_METHODS: 'card' })
        expect(test.exitCode).toBe(69)
        expect(warning(test)).toEqual([expect.objectContaining({ level: 'warn', daemon: 'payment-service', variable: 'PAYMENT_TEST_PROVIDER_ENABLED', methods: ['card'] })])
        const card = await start({ ...baseEnv(empty, dataDir), CARD_PROVIDER_ENABLED: 'true', CARD_PROVIDER_SECRET_KEY: SECRET_KEY, CARD_PROVIDER_WEBHOOK_SECRET: WEBHOOK_SECRET })
        expect(card.exitCode).toBe(69)
        expect(warning(card)).toEqual([])
      } finally {
        await empty.destroy()
      }
    })

    it('no NATS_URL; with no provider either, both are named in the same line', async () => {
      const env: Record<string, string> = baseEnv(database, dataDir)
      delete env.NATS_URL
      const result = await start({ ...env, PAYMENT_TEST_PROVIDER_ENABLED: 'true' })
      expect(result.exitCode).toBe(78)
      expect(refusal(result).errorLines).toHaveLength(1)
      expect(refusal(result).errorLines[0]).toContain('NATS_URL')

      const both = await start(env)
      expect(both.exitCode).toBe(78)
      const { errorLines } = refusal(both)
      expect(errorLines).toHaveLength(1)
      expect(errorLines[0]).toContain('NATS_URL')
      expect(errorLines[0]).toContain('CARD_PROVIDER_ENABLED')
    })

    it('settings are checked before connecting: unreachable NATS still reports the missing card secret, and never echoes the one given', async () => {
      const result = await start({ ...baseEnv(database, dataDir), CARD_PROVIDER_ENABLED: 'true', CARD_PROVIDER_WEBHOOK_SECRET: WEBHOOK_SECRET, NATS_URL: 'nats://127.0.0.1:1' })
      expect(result.exitCode).toBe(78)
      const { errorLines } = refusal(result)
      expect(errorLines).toHaveLength(1)
      expect(errorLines[0]).toContain('CARD_PROVIDER_SECRET_KEY')
      expect(errorLines[0]).not.toContain('CARD_PROVIDER_WEBHOOK_SECRET')
      expect(result.stdout + result.stderr).not.toContain(WEBHOOK_SECRET)
    })
  })
})
