/**
 * The consumer table (payment service spec, "Events"), asserted the same way on every bus
 * adapter and both databases. Events travel the production path: outbox row, relay, bus,
 * consumer. The handler's "effect" is a row in a test table, written through its transaction.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { BusMessage, BusSubscription, EventBus } from '../../../src/events/bus.js'
import { runConsumer, type ConsumerOutcome } from '../../../src/events/consumer.js'
import { enqueueEvent } from '../../../src/events/outbox.js'
import { OutboxRelay } from '../../../src/events/relay.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'
import { silentLogger, uniqueSubjectPrefix } from './support.js'

export interface BusFixture {
  bus: EventBus
  /** Publishes bytes as they are, bypassing the outbox; no message id when `messageId` is omitted. */
  publishRaw(subject: string, data: Uint8Array, messageId?: string): Promise<void>
  /** Messages of the durable not yet acked or termed. */
  pending(durable: string): Promise<number>
}

export interface FixtureFactory {
  /** Called before each test. */
  open(): Promise<BusFixture>
  /** Called after each test. */
  close(fixture: BusFixture): Promise<void>
}

const paymentCompleted = z.object({ payment_id: z.string(), amount: z.number() })
type PaymentCompleted = z.infer<typeof paymentCompleted>

interface Seen {
  outcome: ConsumerOutcome
  messageId: string | undefined
  deliveryCount: number
}

/** A bus whose first ack of each message is lost (turned into a nak): a crash between commit and ack. */
function losingFirstAck(bus: EventBus): EventBus {
  return {
    ...bus,
    subscribe: (options, handler) =>
      bus.subscribe(options, (m: BusMessage) => handler(m.deliveryCount === 1 ? { ...m, ack: () => m.nak() } : m)),
  }
}

export function defineConsumerSuite(label: string, factory: FixtureFactory): void {
  describe.each(DIALECTS)(`consumer table on the ${label} bus, %s`, (dialect) => {
    let t: TestDatabase
    let fx: BusFixture
    let subject: string
    let durable: string
    let seen: Seen[]
    let subscription: BusSubscription | undefined
    const ttlMs = 7 * 86_400_000

    beforeEach(async () => {
      t = await createTestDatabase(dialect)
      await t.db.schema.createTable('test_effects', (table) => {
        table.increments('id')
        table.string('payment_id').notNullable()
        table.integer('delivery').notNullable()
      })
      fx = await factory.open()
      const prefix = uniqueSubjectPrefix()
      subject = `${prefix}.payment_completed`
      durable = `test-${prefix.split('.').pop()}`
      seen = []
      subscription = undefined
    })

    afterEach(async () => {
      await subscription?.close()
      await factory.close(fx)
      await t.destroy()
    })

    const effects = async () => (await t.db('test_effects').select('payment_id')).map((r: { payment_id: string }) => r.payment_id).sort()
    const keys = async () => (await t.db('idempotency_keys').select('key')).map((r: { key: string }) => r.key).sort()
    const count = (outcome: ConsumerOutcome) => seen.filter((s) => s.outcome === outcome).length

    async function consume(
      overrides: {
        bus?: EventBus
        decode?: (payload: Record<string, unknown>) => PaymentCompleted
        confirm?: (event: PaymentCompleted) => Promise<PaymentCompleted>
        handle?: (trx: Parameters<Parameters<typeof runConsumer<PaymentCompleted>>[0]['handle']>[0], event: PaymentCompleted, delivery: number) => Promise<void>
      } = {},
    ): Promise<void> {
      subscription = await runConsumer<PaymentCompleted>({
        bus: overrides.bus ?? fx.bus,
        db: t.db,
        logger: silentLogger,
        durable,
        subject,
        ttlMs,
        retryDelayMs: () => 20,
        decode: overrides.decode ?? ((payload) => paymentCompleted.parse(payload)),
        ...(overrides.confirm ? { confirm: overrides.confirm } : {}),
        handle: async (trx, event, envelope) => {
          await trx('test_effects').insert({ payment_id: event.payment_id, delivery: envelope.deliveryCount })
          await overrides.handle?.(trx, event, envelope.deliveryCount)
        },
        onOutcome: (outcome, info) => seen.push({ outcome, messageId: info.messageId, deliveryCount: info.deliveryCount }),
      })
    }

    async function emit(paymentId: string): Promise<string> {
      const messageId = await t.db.transaction((trx) => enqueueEvent(trx, { subject, payload: { payment_id: paymentId, amount: 10 } }))
      const relay = new OutboxRelay({ db: t.db, bus: fx.bus, logger: silentLogger, wakeOnCommit: false })
      expect(await relay.runOnce()).toBe(1)
      return messageId
    }

    const settled = () => waitFor(async () => (await fx.pending(durable)) === 0, 'every message to be acked')

    it('processes each event once and marks its key processed with the effect', async () => {
      await consume()
      const ids = [await emit('p1'), await emit('p2'), await emit('p3')]
      await waitFor(async () => count('processed') === 3, 'three events processed')
      await settled()
      expect(await effects()).toEqual(['p1', 'p2', 'p3'])
      expect(await keys()).toEqual(ids.map((id) => `idempotency:${durable}:${id}`).sort())
    })

    it.each([
      ['', false],
      [', and with a confirmation step confirms only the first delivery', true],
    ])('acknowledges and skips an event delivered again after it was processed%s', async (_title, confirming) => {
      const confirmed: string[] = []
      const confirm = async (event: PaymentCompleted) => {
        confirmed.push(event.payment_id)
        return event
      }
      await consume({ bus: losingFirstAck(fx.bus), ...(confirming ? { confirm } : {}) })
      const id = await emit('p1')
      await waitFor(async () => count('duplicate') === 1, 'the redelivery to be skipped')
      await settled()
      expect(seen.map((s) => [s.outcome, s.messageId, s.deliveryCount])).toEqual([
        ['processed', id, 1],
        ['duplicate', id, 2],
      ])
      expect(confirmed).toEqual(confirming ? ['p1'] : [])
      expect(await effects()).toEqual(['p1'])
    })

    it('acknowledges malformed messages instead of retrying them', async () => {
      await consume()
      const enc = new TextEncoder()
      await fx.publishRaw(subject, enc.encode('{not json'), crypto.randomUUID())
      await fx.publishRaw(subject, enc.encode('["an","array"]'), crypto.randomUUID())
      await fx.publishRaw(subject, enc.encode('{"payment_id":"p0","amount":1}')) // no message id, no idempotency_key
      await emit('p1')
      await waitFor(async () => count('processed') === 1, 'the good event after them')
      await settled()
      expect(seen.filter((s) => s.outcome === 'malformed').map((s) => s.deliveryCount)).toEqual([1, 1, 1])
      expect(await effects()).toEqual(['p1'])
    })

    it('uses the payload idempotency_key when a producer sends no message id', async () => {
      await consume()
      const body = new TextEncoder().encode('{"idempotency_key":"ext-1","payment_id":"p9","amount":3}')
      await fx.publishRaw(subject, body)
      await fx.publishRaw(subject, body)
      await waitFor(async () => seen.length === 2, 'both copies delivered')
      await settled()
      expect(seen.map((s) => s.outcome)).toEqual(['processed', 'duplicate'])
      expect(await effects()).toEqual(['p9'])
      expect(await keys()).toEqual([`idempotency:${durable}:ext-1`])
    })

    it('redelivers an event it cannot decode until an upgraded decoder understands it', async () => {
      let understood = false
      await consume({
        decode: (payload) => {
          if (!understood) throw new Error('unknown field layout')
          return paymentCompleted.parse(payload)
        },
      })
      await emit('p1')
      await waitFor(async () => count('undecodable') >= 2, 'the event to be redelivered')
      expect(await effects()).toEqual([])
      expect(await keys()).toEqual([])
      understood = true
      await waitFor(async () => count('processed') === 1, 'the event to be processed')
      await settled()
      expect(await effects()).toEqual(['p1'])
      expect(await keys()).toHaveLength(1)
    })

    it('rolls back the effect and the key when the handler fails, and redelivers until it succeeds', async () => {
      let failing = true
      await consume({
        handle: async () => {
          if (failing) throw new Error('subscription activation failed')
        },
      })
      await emit('p1')
      await waitFor(async () => count('failed') >= 2, 'the failed event to be redelivered')
      // The handler wrote its effect before failing: neither it nor the key survived.
      expect(await effects()).toEqual([])
      expect(await keys()).toEqual([])
      failing = false
      await waitFor(async () => count('processed') === 1, 'the event to succeed')
      await settled()
      expect(await effects()).toEqual(['p1'])
      expect(await keys()).toHaveLength(1)
      const processed = seen.find((s) => s.outcome === 'processed')
      expect(processed?.deliveryCount).toBeGreaterThanOrEqual(3)
    })
  })
}
