/**
 * `nodeplane up` against a NATS that is a trust boundary (issue 16): mutual TLS and one nkey user
 * per service, as the split stack and production run it. Without credentials `up` is refused by
 * the server; with NATS_DIR (the `nodeplane certs nats` directory) its payment service publishes
 * as the `payment-service` user and its control plane consumes as `control-plane`, so a payment
 * made through `up` crosses the secured bus and is confirmed and acknowledged.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { connect, type NatsConnection } from 'nats'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { PaymentClient } from '../../src/payments/client.js'
import { ensurePaymentDevCertificates } from '../../src/payments/tls.js'
import { PAYMENT_CONSUMER_DURABLE } from '../../src/subscriptions/activation.js'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS } from '../helpers/db.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { cardPaymentRequest } from '../helpers/payment-requests.js'
import { waitFor } from '../helpers/ports.js'

describe('nodeplane up on a NATS with mutual TLS and per-service users', () => {
  let nats: NatsServer
  let operator: NatsConnection | undefined

  beforeAll(async () => {
    nats = await startNats({ secure: true })
  })
  afterAll(async () => {
    await operator?.close()
    await nats?.destroy()
  })

  it('without credentials the server refuses it (exit 69); NATS_DIR with a single identity\'s files is refused (exit 78)', async () => {
    const refused = await nodeplane(['up', '--data-dir', path.join(tempDir(), 'data')], { env: { ...(await upPorts()), NATS_URL: nats.url } })
    expect(refused.exitCode).toBe(69)
    expect(refused.stderr.split('\n').filter((l) => l.startsWith('Error:'))).toEqual([expect.stringContaining('NATS')])

    const security = nats.security
    if (!security) throw new Error('a secure nats-server has its files')
    const both = await nodeplane(['up', '--data-dir', path.join(tempDir(), 'data')], { env: { ...(await upPorts()), NATS_URL: nats.url, NATS_DIR: security.dir, NATS_CA_FILE: security.caFile } })
    expect(both.exitCode).toBe(78)
    expect(both.stderr).toContain('NATS_DIR and NATS_CA_FILE: set NATS_DIR (one identity per service) or the single identity')
  })

  for (const dialect of DIALECTS) {
    it(`${dialect}: with NATS_DIR a payment made through up crosses the bus as payment-service and is consumed as control-plane`, { timeout: 120_000 }, async () => {
      const security = nats.security
      if (!security) throw new Error('a secure nats-server has its files')
      operator ??= await connect({ servers: nats.url, ...nats.connectionFor('operator') })
      const jsm = await operator.jetstreamManager()
      // The server outlives both cases: count from what the previous case left.
      const before = await jsm.streams.info('PAYMENTS').then((i) => i.state.messages).catch(() => 0)
      const dataDir = path.join(tempDir(), 'data')
      const databases = dialect === 'postgres' ? await Promise.all([createTestDatabase('postgres'), createTestDatabase('postgres', { database: 'payments', migrated: true })]) : []
      onTestFinished(async () => {
        for (const database of databases) await database.destroy()
      })
      const databaseEnv: Record<string, string> = databases.length === 2 ? { DATABASE_URL: databases[0]?.url as string, PAYMENTS_DATABASE_URL: databases[1]?.url as string } : {}
      const child = spawnNodeplane(['up', '--data-dir', dataDir], { env: { ...(await upPorts()), ...databaseEnv, NATS_URL: nats.url, NATS_DIR: security.dir, PAYMENT_TEST_PROVIDER_DELAY: '200ms' } })
      let client: PaymentClient | undefined
      let paymentId: string | undefined
      try {
        const stack = await waitForFile<StackFile>(path.join(dataDir, 'stack.json'), 'stack.json', 60_000)
        expect(stack.bus).toBe('nats')
        const ready = await fetch(`${stack.api_url}/readyz`)
        expect(ready.status).toBe(200)
        expect(await ready.json()).toMatchObject({ components: { bus: { status: 'up' } } })

        const certs = ensurePaymentDevCertificates(path.join(dataDir, 'payments-ca'))
        client = new PaymentClient({
          target: stack.payment_grpc as string,
          ca: fs.readFileSync(certs.caFile),
          cert: fs.readFileSync(certs.clients[0]?.certFile as string),
          key: fs.readFileSync(certs.clients[0]?.keyFile as string),
          timeoutMs: 10_000,
        })
        const customerId = crypto.randomUUID()
        const { payment } = await client.initiatePayment(cardPaymentRequest(customerId))
        paymentId = payment.id

        // Seen from the operator's identity: the completion is in PAYMENTS (published by the payment
        // service's user, the only one allowed) and the control plane's consumer acknowledged it.
        await waitFor(async () => (await client?.getPayment(payment.id, customerId))?.status === 'completed', 'the test provider to complete the payment')
        await waitFor(async () => (await jsm.streams.info('PAYMENTS')).state.messages > before, 'payment.completed in PAYMENTS')
        const published = (await jsm.streams.info('PAYMENTS')).state.last_seq
        await waitFor(async () => (await jsm.consumers.info('PAYMENTS', PAYMENT_CONSUMER_DURABLE)).ack_floor.stream_seq >= published, 'the payment consumer to acknowledge it')
      } finally {
        client?.close()
        child.kill('SIGTERM')
      }
      const result = await child
      expect(result.exitCode).toBe(143)
      // The only errors are the consumer's verdict on this payment, whose customer is no user of
      // this stack: it was read and judged, nothing else failed (no permission violation either).
      const errors = jsonLogLines(result.all).filter((l) => l.level === 'error' || l.level === 'fatal')
      expect(errors.length).toBeGreaterThan(0)
      for (const line of errors) expect(line).toMatchObject({ component: 'payment-activation', payment_id: paymentId })
      expect(String(result.all)).not.toMatch(/permissions violation/i)
    })
  }
})
