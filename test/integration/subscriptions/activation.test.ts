/**
 * The payment consumer `main-app-payment` (payment service spec, "Events"; docs/subscriptions.md)
 * against real databases, on the in-process bus and on a real nats-server: activation exactly
 * once however often and in whatever order events arrive, the line-item fallback, failed and
 * canceled payments, and the consumer table (malformed acked, undecodable redelivered, a failing
 * handler leaves nothing behind).
 */
import crypto from 'node:crypto'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { staticChainSource, type ChainCatalogueSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { isPostgres, toDate } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import type { BusMessage, BusSubscription, EventBus } from '../../../src/events/bus.js'
import { createEventHandler, type ConsumerOutcome } from '../../../src/events/consumer.js'
import { encodePayload } from '../../../src/events/envelope.js'
import { createLocalBus, type LocalBus } from '../../../src/events/local-bus.js'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { createLogger } from '../../../src/log.js'
import type { PaymentEvent } from '../../../src/payments/events.js'
import { PROVISION_WORKFLOW } from '../../../src/provisioning/provision.js'
import { PAYMENT_CONSUMER_DURABLE, paymentConsumerOptions, startPaymentConsumer } from '../../../src/subscriptions/activation.js'
import { createSubscription, durationEnd } from '../../../src/subscriptions/subscriptions.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertUser } from '../../helpers/fixtures.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { waitFor } from '../../helpers/ports.js'
import { LogCapture } from '../http/harness.js'

const NOW = new Date('2026-03-10T12:00:00.000Z')
const now = () => new Date(NOW.getTime())
const TTL_MS = 7 * 86_400_000

let chains: ChainCatalogueSource
beforeAll(async () => {
  chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
})

function paymentEvent(event: Pick<PaymentEvent, 'payment_id' | 'customer_id'> & Partial<PaymentEvent>): PaymentEvent {
  return {
    version: 1,
    status: 'completed',
    method: 'card',
    provider: 'test',
    amount_minor: 1_000,
    currency: 'USD',
    subscription_ids: [],
    items: [],
    failure_reason: null,
    completed_at: NOW.toISOString(),
    occurred_at: NOW.toISOString(),
    ...event,
  }
}

const SUBJECT = { completed: 'payment.completed', failed: 'payment.failed', canceled: 'payment.canceled' } as const

interface Seen {
  outcome: ConsumerOutcome
  subject: string
  messageId: string | undefined
}

/** A pending_payment subscription created by the real service, linked to `paymentId` as POST /payments does. */
async function pendingSubscription(db: Db, userId: string, paymentId: string | null, nodeType = 'full', duration: '1w' | '1m' = '1m'): Promise<string> {
  const { subscription } = await createSubscription(db, { userId, chainProfileId: 'devnet', nodeType, duration }, { catalogue: chains.current(), now: new Date(NOW.getTime() - 60_000) })
  if (paymentId) await db('subscriptions').where({ id: subscription.id }).update({ payment_id: paymentId, version: 2 })
  return subscription.id
}

async function mirror(db: Db, paymentId: string, userId: string, status = 'pending'): Promise<void> {
  await db('payment_requests').insert({
    id: paymentId,
    user_id: userId,
    idempotency_key: crypto.randomUUID(),
    method: 'card',
    status,
    amount_minor: 1_000,
    currency: 'USD',
    subscription_ids: JSON.stringify([]),
    created_at: NOW,
    updated_at: NOW,
  })
}

async function count(db: Db, table: string, where: Record<string, unknown> = {}): Promise<number> {
  const row = (await db(table).where(where).count({ n: '*' }).first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}

async function provisionRuns(db: Db): Promise<string[]> {
  return ((await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW }).orderBy('workflow_key').pluck('workflow_key')) as string[]).map(String)
}

/** A real database failure on node insert, switched on and off (a trigger, not a mock). */
async function refuseNodeInserts(db: Db, refuse: boolean): Promise<void> {
  if (isPostgres(db)) {
    if (refuse) {
      await db.raw(`CREATE OR REPLACE FUNCTION test_refuse_node() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'node insert refused (test)'; END $$ LANGUAGE plpgsql`)
      await db.raw('CREATE TRIGGER test_refuse_node BEFORE INSERT ON nodes FOR EACH ROW EXECUTE FUNCTION test_refuse_node()')
    } else {
      await db.raw('DROP TRIGGER test_refuse_node ON nodes')
    }
  } else if (refuse) {
    await db.raw("CREATE TRIGGER test_refuse_node BEFORE INSERT ON nodes BEGIN SELECT RAISE(ABORT, 'node insert refused (test)'); END")
  } else {
    await db.raw('DROP TRIGGER test_refuse_node')
  }
}

/** The assertions of "paid once, activated once", shared by the bus variants. */
async function expectActivatedOnce(db: Db, subscriptionId: string, paymentId: string): Promise<string> {
  const sub = (await db('subscriptions').where({ id: subscriptionId }).first()) as Record<string, unknown>
  expect(sub.status).toBe('active')
  expect(sub.payment_id).toBe(paymentId)
  expect(toDate(sub.activated_at).toISOString()).toBe(NOW.toISOString())
  expect(toDate(sub.expires_at).toISOString()).toBe(durationEnd(NOW, '1m').toISOString())
  expect(sub.grace_period_expires_at).toBeNull()
  const nodes = (await db('nodes').where({ subscription_id: subscriptionId }).select('id', 'state', 'chain_profile_id', 'node_type', 'provider', 'region', 'instance_type')) as Array<Record<string, unknown>>
  expect(nodes).toHaveLength(1)
  const node = nodes[0] as Record<string, unknown>
  expect(node).toMatchObject({ state: 'provisioning', chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })
  expect((await db('workflow_runs').where({ workflow_name: PROVISION_WORKFLOW, workflow_key: node.id }).select('id')).length).toBe(1)
  return String(node.id)
}

describe.each(DIALECTS)('payment consumer on the in-process bus, %s', (dialect) => {
  let t: TestDatabase
  let bus: LocalBus
  let subscription: BusSubscription | undefined
  let seen: Seen[]
  let logs: LogCapture

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    bus = createLocalBus()
    seen = []
    logs = new LogCapture()
    subscription = undefined
  })

  afterEach(async () => {
    await subscription?.close()
    await bus.close()
    await t.destroy()
  })

  async function consume(options: { concurrency?: number } = {}): Promise<void> {
    subscription = await startPaymentConsumer({
      bus,
      db: t.db,
      logger: createLogger({ destination: logs, level: 'debug' }),
      chains,
      idempotencyTtlMs: TTL_MS,
      now,
      retryDelayMs: () => 20,
      onOutcome: (outcome, info) => seen.push({ outcome, subject: info.subject, messageId: info.messageId }),
      ...options,
    })
  }

  async function publish(subject: string, payload: object, messageId: string = crypto.randomUUID()): Promise<string> {
    await bus.publish({ subject, data: encodePayload(payload as Record<string, unknown>), messageId })
    return messageId
  }

  const outcomes = (outcome: ConsumerOutcome) => seen.filter((s) => s.outcome === outcome).length
  const settled = () => waitFor(async () => bus.pending(PAYMENT_CONSUMER_DURABLE) === 0, 'every payment event to be acked')

  it('activates a linked subscription exactly once however often and in whatever order the events come', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const failed = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, paid)
    const s2 = await pendingSubscription(t.db, user, failed, 'archive')
    await mirror(t.db, paid, user)
    await mirror(t.db, failed, user)
    await consume({ concurrency: 4 })

    const completed = paymentEvent({ payment_id: paid, customer_id: user, subscription_ids: [s1], items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m', unit_price_minor: 1_000 }] })
    // The other payment's failure first, then the completion three times (republished: three message ids).
    await publish(SUBJECT.failed, paymentEvent({ payment_id: failed, customer_id: user, status: 'failed', failure_reason: 'card declined', completed_at: null, subscription_ids: [s2] }))
    await Promise.all([publish(SUBJECT.completed, completed), publish(SUBJECT.completed, completed), publish(SUBJECT.completed, completed)])
    await waitFor(async () => outcomes('processed') === 4, 'four events processed')
    await settled()

    await expectActivatedOnce(t.db, s1, paid)
    expect(await provisionRuns(t.db)).toHaveLength(1)
    expect(await count(t.db, 'subscriptions', { user_id: user })).toBe(2)
    expect(await t.db('payment_requests').where({ id: paid }).first('status', 'failure_reason')).toEqual({ status: 'completed', failure_reason: null })
    expect(toDate((await t.db('payment_requests').where({ id: paid }).first('completed_at')).completed_at).toISOString()).toBe(NOW.toISOString())

    // The failed payment's subscription is unlinked (payable again), still pending, and the user is told.
    expect(await t.db('subscriptions').where({ id: s2 }).first('status', 'payment_id')).toEqual({ status: 'pending_payment', payment_id: null })
    expect(await t.db('payment_requests').where({ id: failed }).first('status', 'failure_reason')).toEqual({ status: 'failed', failure_reason: 'card declined' })
    const notes = (await t.db('notifications').where({ user_id: user }).select('kind', 'title', 'body', 'data')) as Array<Record<string, unknown>>
    expect(notes).toHaveLength(1)
    expect(notes[0]).toMatchObject({ kind: 'payment_failed', title: 'Payment failed' })
    expect(String(notes[0]?.body)).toContain('card declined')
    expect(JSON.parse(String(typeof notes[0]?.data === 'string' ? notes[0]?.data : JSON.stringify(notes[0]?.data)))).toEqual({ payment_id: failed, failure_reason: 'card declined' })

    // A failure arriving late for the payment that already completed changes nothing it should not.
    await publish(SUBJECT.canceled, paymentEvent({ payment_id: paid, customer_id: user, status: 'canceled', completed_at: null }))
    await waitFor(async () => outcomes('processed') === 5, 'the late cancel processed')
    expect(await t.db('subscriptions').where({ id: s1 }).first('status', 'payment_id')).toEqual({ status: 'active', payment_id: paid })
    expect(await t.db('payment_requests').where({ id: paid }).first('status')).toEqual({ status: 'completed' })
    // ... and tells the user nothing: the only notification is still the other payment's failure.
    expect(await t.db('notifications').where({ user_id: user }).pluck('kind')).toEqual(['payment_failed'])
  })

  it('skips a redelivery of an activation that committed before its ack was lost', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, paid)
    const handler = createEventHandler(paymentConsumerOptions({ bus, db: t.db, logger: createLogger({ level: 'silent' }), chains, idempotencyTtlMs: TTL_MS, now }))
    const data = encodePayload(paymentEvent({ payment_id: paid, customer_id: user, subscription_ids: [s1] }))
    const settledAs: string[] = []
    const message = (deliveryCount: number): BusMessage => ({
      subject: SUBJECT.completed,
      data,
      messageId: 'msg-activation-1',
      headers: {},
      deliveryCount,
      // The first ack never reaches the bus (the consumer was killed after the commit).
      ack: () => settledAs.push(deliveryCount === 1 ? 'ack lost' : 'ack'),
      nak: () => settledAs.push('nak'),
      term: () => settledAs.push('term'),
    })
    expect(await handler(message(1))).toBe('processed')
    expect(await handler(message(2))).toBe('duplicate')
    expect(settledAs).toEqual(['ack lost', 'ack'])
    await expectActivatedOnce(t.db, s1, paid)
    expect(await provisionRuns(t.db)).toHaveLength(1)
  })

  it('activates a subscription listed in the event but not linked yet (matched), and never another payment\'s', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const other = crypto.randomUUID()
    const matched = await pendingSubscription(t.db, user, null)
    const foreign = await pendingSubscription(t.db, user, other, 'archive')
    await consume()
    await publish(SUBJECT.completed, paymentEvent({ payment_id: paid, customer_id: user, subscription_ids: [matched, foreign] }))
    await waitFor(async () => outcomes('processed') === 1, 'the event processed')
    await expectActivatedOnce(t.db, matched, paid)
    expect(await t.db('subscriptions').where({ id: foreign }).first('status', 'payment_id')).toEqual({ status: 'pending_payment', payment_id: other })
  })

  it('falls back to the line items when nothing is linked, skipping an item the catalogue no longer offers', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    await consume({ concurrency: 3 })
    const event = paymentEvent({
      payment_id: paid,
      customer_id: user,
      // Linked subscriptions that the cleanup already deleted.
      subscription_ids: [crypto.randomUUID()],
      items: [
        { chain_profile_id: 'devnet', node_type: 'full', duration: '1m', unit_price_minor: 1_000 },
        { chain_profile_id: 'devnet', node_type: 'archive', duration: '1w', unit_price_minor: 500 },
        { chain_profile_id: 'retired-chain', node_type: 'full', duration: '1m', unit_price_minor: 700 },
      ],
    })
    // Delivered three times under three message ids, concurrently.
    await Promise.all([publish(SUBJECT.completed, event), publish(SUBJECT.completed, event), publish(SUBJECT.completed, event)])
    await waitFor(async () => outcomes('processed') === 3, 'all three copies processed (none nak\'ed forever)')
    await settled()

    const subs = (await t.db('subscriptions').where({ user_id: user }).orderBy('node_type').select('id', 'node_type', 'duration', 'status', 'payment_id', 'provider', 'region', 'instance_type', 'expires_at', 'activated_at')) as Array<Record<string, unknown>>
    expect(subs.map((s) => [s.node_type, s.duration, s.status, s.payment_id, s.provider, s.region, s.instance_type])).toEqual([
      ['archive', '1w', 'active', paid, 'local', 'local', 'local.large'],
      ['full', '1m', 'active', paid, 'local', 'local', 'local.small'],
    ])
    expect(subs.map((s) => toDate(s.expires_at).toISOString())).toEqual([durationEnd(NOW, '1w').toISOString(), durationEnd(NOW, '1m').toISOString()])
    for (const s of subs) expect(await count(t.db, 'nodes', { subscription_id: s.id, state: 'provisioning' })).toBe(1)
    const nodeIds = ((await t.db('nodes').pluck('id')) as string[]).sort()
    expect(await provisionRuns(t.db)).toEqual(nodeIds)
    const skipped = logs.lines.filter((l) => l.level === 'error' || (l.level as unknown) === 50)
    expect(skipped.some((l) => String(l.msg).includes('no longer offered'))).toBe(true)
  })

  it('unlinks the pending subscriptions of a canceled payment and tells the user', async () => {
    const user = await insertUser(t.db, NOW)
    const canceled = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, canceled)
    await mirror(t.db, canceled, user)
    await consume()
    await publish(SUBJECT.canceled, paymentEvent({ payment_id: canceled, customer_id: user, status: 'canceled', completed_at: null }))
    await waitFor(async () => outcomes('processed') === 1, 'the event processed')
    expect(await t.db('subscriptions').where({ id: s1 }).first('status', 'payment_id', 'version')).toMatchObject({ status: 'pending_payment', payment_id: null })
    expect(await t.db('payment_requests').where({ id: canceled }).first('status')).toEqual({ status: 'canceled' })
    expect(await t.db('notifications').where({ user_id: user }).pluck('kind')).toEqual(['payment_canceled'])
  })

  it('acknowledges malformed messages and redelivers ones it cannot decode, writing nothing', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, paid)
    await consume()
    const raw = (text: string) => bus.publish({ subject: SUBJECT.completed, data: new TextEncoder().encode(text), messageId: crypto.randomUUID() })
    await raw('{not json')
    await raw('["an","array"]')
    // JSON, but not a payment event this version understands.
    await raw(JSON.stringify({ payment_id: paid, customer_id: user, status: 'completed' }))
    await waitFor(async () => outcomes('malformed') === 2 && outcomes('undecodable') >= 2, 'malformed acked, undecodable redelivered')
    expect(await t.db('subscriptions').where({ id: s1 }).first('status')).toEqual({ status: 'pending_payment' })
    expect(await count(t.db, 'nodes')).toBe(0)
    expect(await count(t.db, 'idempotency_keys')).toBe(0)
    // Only the undecodable one is still outstanding.
    expect(bus.pending(PAYMENT_CONSUMER_DURABLE)).toBe(1)
  })

  it('leaves nothing half-written when the handler fails, and activates once the failure is gone', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, paid)
    const s2 = await pendingSubscription(t.db, user, paid, 'archive')
    await mirror(t.db, paid, user)
    await refuseNodeInserts(t.db, true)
    await consume()
    await publish(SUBJECT.completed, paymentEvent({ payment_id: paid, customer_id: user, subscription_ids: [s1, s2] }))
    await waitFor(async () => outcomes('failed') >= 2, 'the failed activation to be redelivered')

    // Neither subscription moved, no workflow, the mirror untouched, the key not marked.
    expect((await t.db('subscriptions').whereIn('id', [s1, s2]).pluck('status')).sort()).toEqual(['pending_payment', 'pending_payment'])
    expect(await count(t.db, 'nodes')).toBe(0)
    expect(await count(t.db, 'workflow_runs')).toBe(0)
    expect(await t.db('payment_requests').where({ id: paid }).first('status')).toEqual({ status: 'pending' })
    expect(await count(t.db, 'idempotency_keys')).toBe(0)

    await refuseNodeInserts(t.db, false)
    await waitFor(async () => outcomes('processed') === 1, 'the redelivery to succeed')
    await settled()
    await expectActivatedOnce(t.db, s1, paid)
    expect(await t.db('subscriptions').where({ id: s2 }).first('status')).toEqual({ status: 'active' })
    expect(await provisionRuns(t.db)).toHaveLength(2)
  })
})

describe.each(DIALECTS)('payment consumer on NATS JetStream, %s', (dialect) => {
  let nats: NatsServer
  let bus: EventBus
  let t: TestDatabase

  beforeAll(async () => {
    nats = await startNats()
    bus = await connectNatsBus({ url: nats.url, logger: createLogger({ level: 'silent' }), name: 'activation-test' })
  })

  afterAll(async () => {
    await bus?.close()
    await nats?.destroy()
  })

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
  })

  afterEach(async () => {
    await t.destroy()
  })

  it('activates once although the completion is republished, redelivered after a lost ack, and preceded by another payment\'s failure', async () => {
    const user = await insertUser(t.db, NOW)
    const paid = crypto.randomUUID()
    const failed = crypto.randomUUID()
    const s1 = await pendingSubscription(t.db, user, paid)
    const s2 = await pendingSubscription(t.db, user, failed, 'archive')
    const seen: Seen[] = []
    // The first ack of every message is lost: each is delivered at least twice.
    const losingFirstAck: EventBus = {
      ...bus,
      subscribe: (options, handler) => bus.subscribe(options, (m) => handler(m.deliveryCount === 1 ? { ...m, ack: () => m.nak() } : m)),
    }
    const subscription = await startPaymentConsumer({
      bus: losingFirstAck,
      db: t.db,
      logger: createLogger({ level: 'silent' }),
      chains,
      idempotencyTtlMs: TTL_MS,
      now,
      retryDelayMs: () => 20,
      onOutcome: (outcome, info) => seen.push({ outcome, subject: info.subject, messageId: info.messageId }),
    })
    try {
      const completed = encodePayload(paymentEvent({ payment_id: paid, customer_id: user, subscription_ids: [s1] }))
      await bus.publish({ subject: SUBJECT.failed, data: encodePayload(paymentEvent({ payment_id: failed, customer_id: user, status: 'failed', failure_reason: 'expired', completed_at: null })), messageId: crypto.randomUUID() })
      for (let i = 0; i < 3; i++) await bus.publish({ subject: SUBJECT.completed, data: completed, messageId: crypto.randomUUID() })
      await waitFor(async () => seen.filter((s) => s.outcome === 'duplicate').length === 4, 'every message redelivered once and skipped')
      expect(seen.filter((s) => s.outcome === 'processed')).toHaveLength(4)

      await expectActivatedOnce(t.db, s1, paid)
      expect(await provisionRuns(t.db)).toHaveLength(1)
      expect(await t.db('subscriptions').where({ id: s2 }).first('status', 'payment_id')).toEqual({ status: 'pending_payment', payment_id: null })
      expect(await t.db('notifications').where({ user_id: user }).pluck('kind')).toEqual(['payment_failed'])
    } finally {
      await subscription.close()
    }
  })
})
