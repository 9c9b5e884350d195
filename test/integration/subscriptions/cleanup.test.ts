/**
 * The subscription status table and the cleanup scheduler (spec: "Subscription status";
 * docs/subscriptions.md) on both databases. Time only moves through the injected clock.
 */
import crypto from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { toDate } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { requestTermination } from '../../../src/provisioning/triggers.js'
import { TERMINATE_WORKFLOW } from '../../../src/provisioning/terminate.js'
import { runSubscriptionCleanup, scheduleSubscriptionCleanup, SUBSCRIPTION_CLEANUP_JOB } from '../../../src/subscriptions/cleanup.js'
import {
  canDeleteSubscription,
  canTransitionSubscription,
  InvalidSubscriptionTransitionError,
  StaleSubscriptionError,
  SUBSCRIPTION_TRANSITIONS,
  transitionSubscription,
} from '../../../src/subscriptions/lifecycle.js'
import { SUBSCRIPTION_STATUSES, type SubscriptionStatus } from '../../../src/subscriptions/views.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertUser, setNodeState } from '../../helpers/fixtures.js'

const logger = createLogger({ level: 'silent' })
const MINUTE = 60_000
const HOUR = 60 * MINUTE
const TTL = 30 * MINUTE
const GRACE = 24 * HOUR
const T0 = new Date('2026-05-01T00:00:00.000Z')
const at = (ms: number) => new Date(T0.getTime() + ms)

describe('the subscription status table', () => {
  const spec: Array<[SubscriptionStatus, SubscriptionStatus]> = [
    ['pending_payment', 'active'],
    ['active', 'expiring'],
    ['expiring', 'terminated'],
    // Extension (docs/subscriptions.md, "Operator termination"): `node terminate --end-subscription`.
    ['active', 'terminated'],
  ]

  it.each(SUBSCRIPTION_STATUSES.flatMap((from) => SUBSCRIPTION_STATUSES.map((to) => [from, to] as const)))('%s -> %s is allowed only as the spec (and the documented extension) lists it', (from, to) => {
    const allowed = spec.some(([f, t]) => f === from && t === to)
    expect(canTransitionSubscription(from, to)).toBe(allowed)
  })

  it('is terminal in terminated, and only pending_payment is ever deleted', () => {
    expect(SUBSCRIPTION_TRANSITIONS.terminated).toEqual([])
    expect(SUBSCRIPTION_STATUSES.filter(canDeleteSubscription)).toEqual(['pending_payment'])
  })
})

async function subscription(db: Db, userId: string, fields: { status: SubscriptionStatus; created_at?: Date; expires_at?: Date; grace_period_expires_at?: Date | null; payment_id?: string | null; node_type?: string }): Promise<string> {
  const id = crypto.randomUUID()
  const created = fields.created_at ?? T0
  await db('subscriptions').insert({
    id,
    user_id: userId,
    chain_profile_id: 'devnet',
    node_type: fields.node_type ?? 'full',
    duration: '1m',
    provider: 'local',
    region: 'local',
    instance_type: 'local.small',
    status: fields.status,
    expires_at: fields.expires_at ?? at(30 * 24 * HOUR),
    grace_period_expires_at: fields.grace_period_expires_at ?? null,
    payment_id: fields.payment_id ?? null,
    created_at: created,
    updated_at: created,
  })
  return id
}

async function mirror(db: Db, paymentId: string, userId: string, status: string): Promise<void> {
  await db('payment_requests').insert({
    id: paymentId,
    user_id: userId,
    idempotency_key: crypto.randomUUID(),
    method: 'card',
    status,
    amount_minor: 1_000,
    currency: 'USD',
    subscription_ids: JSON.stringify([]),
    created_at: T0,
    updated_at: T0,
  })
}

const statusOf = async (db: Db, id: string) => ((await db('subscriptions').where({ id }).first('status')) as { status: string } | undefined)?.status ?? 'deleted'

describe.each(DIALECTS)('subscription cleanup on %s', (dialect) => {
  let t: TestDatabase
  let user: string
  const cleanup = (now: Date) => runSubscriptionCleanup(t.db, { now, pendingTtlMs: TTL, gracePeriodMs: GRACE, logger })

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    user = await insertUser(t.db, T0)
  })

  afterEach(async () => {
    await t.destroy()
  })

  it('moves one subscription with its version lock and refuses moves the table does not have', async () => {
    const id = await subscription(t.db, user, { status: 'pending_payment' })
    await expect(transitionSubscription(t.db, { id, from: 'pending_payment', to: 'expiring', expectedVersion: 1, now: T0 })).rejects.toBeInstanceOf(InvalidSubscriptionTransitionError)
    await expect(transitionSubscription(t.db, { id, from: 'pending_payment', to: 'active', expectedVersion: 7, now: T0 })).rejects.toBeInstanceOf(StaleSubscriptionError)
    expect(await transitionSubscription(t.db, { id, from: 'pending_payment', to: 'active', expectedVersion: 1, now: T0 })).toEqual({ version: 2 })
    // The same move again: the row is no longer pending_payment at version 1.
    await expect(transitionSubscription(t.db, { id, from: 'pending_payment', to: 'active', expectedVersion: 1, now: T0 })).rejects.toBeInstanceOf(StaleSubscriptionError)
    expect(await t.db('subscriptions').where({ id }).first('status', 'version')).toEqual({ status: 'active', version: 2 })
  })

  it('deletes unpaid subscriptions after the TTL, not before, never while their payment can still complete', async () => {
    const unpaid = await subscription(t.db, user, { status: 'pending_payment' })
    await t.db('provisioning_inputs').insert({ id: crypto.randomUUID(), subscription_id: unpaid, name: 'operator_label', type: 'text', phase: 'pre_provision', value: 'mine', status: 'pending', created_at: T0, updated_at: T0 })
    const openPayment = crypto.randomUUID()
    const waiting = await subscription(t.db, user, { status: 'pending_payment', payment_id: openPayment, node_type: 'archive' })
    await mirror(t.db, openPayment, user, 'processing')
    const failedPayment = crypto.randomUUID()
    const afterFailure = await subscription(t.db, user, { status: 'pending_payment', payment_id: failedPayment, created_at: at(-MINUTE), node_type: 'x1' })
    await mirror(t.db, failedPayment, user, 'failed')
    const noMirror = await subscription(t.db, user, { status: 'pending_payment', payment_id: 'pay_unknown', node_type: 'x2' })
    // Paid, and not activated yet (its payment.completed is still on its way): kept.
    const paidPayment = crypto.randomUUID()
    const paid = await subscription(t.db, user, { status: 'pending_payment', payment_id: paidPayment, node_type: 'x4' })
    await mirror(t.db, paidPayment, user, 'completed')
    const younger = await subscription(t.db, user, { status: 'pending_payment', created_at: at(10 * MINUTE), node_type: 'x3' })

    expect(await cleanup(at(TTL - 1))).toMatchObject({ deleted: 1 }) // only the one created a minute earlier
    expect(await statusOf(t.db, afterFailure)).toBe('deleted')
    expect(await statusOf(t.db, unpaid)).toBe('pending_payment')

    expect(await cleanup(at(TTL))).toEqual({ deleted: 2, expiring: 0, terminated: 0, terminations_started: 0 })
    expect(await statusOf(t.db, unpaid)).toBe('deleted')
    expect(await statusOf(t.db, noMirror)).toBe('deleted')
    expect(await t.db('provisioning_inputs').where({ subscription_id: unpaid }).select('id')).toEqual([])
    expect(await statusOf(t.db, waiting)).toBe('pending_payment')
    expect(await statusOf(t.db, paid)).toBe('pending_payment')
    expect(await statusOf(t.db, younger)).toBe('pending_payment')

    // The payment ends (payment.failed unlinks it): the next pass deletes it.
    await t.db('payment_requests').where({ id: openPayment }).update({ status: 'failed' })
    expect(await cleanup(at(TTL + MINUTE))).toMatchObject({ deleted: 1 })
    expect(await statusOf(t.db, waiting)).toBe('deleted')
    expect(await cleanup(at(10 * MINUTE + TTL))).toMatchObject({ deleted: 1 })
    expect(await statusOf(t.db, younger)).toBe('deleted')
    // Nothing else was touched.
    expect(await t.db('notifications').select('id')).toEqual([])
  })

  it('moves expired active subscriptions to expiring with a 24 h grace period, nodes untouched', async () => {
    const expired = await subscription(t.db, user, { status: 'active', expires_at: T0 })
    const current = await subscription(t.db, user, { status: 'active', expires_at: at(HOUR), node_type: 'archive' })
    const node = await insertNode(t.db, { subscription_id: expired, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    await setNodeState(t.db, node.id, 'healthy')

    expect(await cleanup(at(-1))).toMatchObject({ expiring: 0 })
    expect(await cleanup(at(5 * MINUTE))).toEqual({ deleted: 0, expiring: 1, terminated: 0, terminations_started: 0 })
    const row = (await t.db('subscriptions').where({ id: expired }).first('status', 'grace_period_expires_at', 'version')) as Record<string, unknown>
    expect(row.status).toBe('expiring')
    expect(Number(row.version)).toBe(2)
    expect(toDate(row.grace_period_expires_at).toISOString()).toBe(at(5 * MINUTE + GRACE).toISOString())
    expect(await statusOf(t.db, current)).toBe('active')
    expect(await t.db('nodes').where({ id: node.id }).first('state')).toEqual({ state: 'healthy' })
    expect(await t.db('workflow_runs').select('id')).toEqual([])

    const notes = (await t.db('notifications').where({ user_id: user }).select('kind', 'data')) as Array<{ kind: string; data: unknown }>
    expect(notes.map((n) => n.kind)).toEqual(['subscription_expiring'])
    const data = typeof notes[0]?.data === 'string' ? JSON.parse(notes[0].data) : notes[0]?.data
    expect(data).toEqual({ subscription_id: expired, grace_period_expires_at: at(5 * MINUTE + GRACE).toISOString() })

    // A second pass finds nothing new: no second notification.
    expect(await cleanup(at(6 * MINUTE))).toMatchObject({ expiring: 0 })
    expect(await t.db('notifications').where({ user_id: user }).select('id')).toHaveLength(1)
  })

  it('terminates expiring subscriptions after the grace period and starts every node\'s terminate workflow once', async () => {
    const ending = await subscription(t.db, user, { status: 'expiring', expires_at: at(-GRACE), grace_period_expires_at: T0 })
    const inGrace = await subscription(t.db, user, { status: 'expiring', expires_at: at(-HOUR), grace_period_expires_at: at(HOUR), node_type: 'archive' })
    // One live node per subscription: the replaced ones first.
    const gone = await insertNode(t.db, { subscription_id: ending, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    await setNodeState(t.db, gone.id, 'terminated')
    // A failed node may still hold keys or a host: it is cleaned up too. Its run already exists.
    const broken = await insertNode(t.db, { subscription_id: ending, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    await setNodeState(t.db, broken.id, 'failed')
    await requestTermination(t.db, broken.id, 'operator', T0)
    const live = await insertNode(t.db, { subscription_id: ending, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    await setNodeState(t.db, live.id, 'healthy')
    const graceNode = await insertNode(t.db, { subscription_id: inGrace, chain_profile_id: 'devnet', node_type: 'archive' }, T0)

    expect(await cleanup(at(-1))).toMatchObject({ terminated: 0 })
    expect(await cleanup(T0)).toEqual({ deleted: 0, expiring: 0, terminated: 1, terminations_started: 1 })
    expect(await statusOf(t.db, ending)).toBe('terminated')
    expect(await statusOf(t.db, inGrace)).toBe('expiring')
    const runs = async () => ((await t.db('workflow_runs').where({ workflow_name: TERMINATE_WORKFLOW }).pluck('workflow_key')) as string[]).sort()
    expect(await runs()).toEqual([live.id, broken.id].sort())
    expect(await t.db('notifications').where({ user_id: user }).pluck('kind')).toEqual(['subscription_terminated'])

    // Idempotent: a second pass (or a second replica after a crash) starts nothing more.
    expect(await cleanup(at(MINUTE))).toEqual({ deleted: 0, expiring: 0, terminated: 0, terminations_started: 0 })
    expect(await runs()).toEqual([live.id, broken.id].sort())
    expect(await t.db('notifications').where({ user_id: user }).select('id')).toHaveLength(1)

    // The other one's grace ends later.
    expect(await cleanup(at(HOUR))).toMatchObject({ terminated: 1, terminations_started: 1 })
    expect(await runs()).toEqual([live.id, broken.id, graceNode.id].sort())
  })

  it("deletes a terminated subscription's secret inputs (the sealed boxes the server key opens), its text inputs and other subscriptions' untouched", async () => {
    const ending = await subscription(t.db, user, { status: 'expiring', expires_at: at(-GRACE), grace_period_expires_at: T0 })
    const inGrace = await subscription(t.db, user, { status: 'expiring', expires_at: at(-HOUR), grace_period_expires_at: at(HOUR) })
    // A failed node only: its terminate run cleans up without touching the subscription's inputs,
    // so the subscription's own termination is what deletes them.
    const broken = await insertNode(t.db, { subscription_id: ending, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    await setNodeState(t.db, broken.id, 'failed')
    const input = (subscriptionId: string, name: string, type: 'secret' | 'text') => ({
      id: crypto.randomUUID(), subscription_id: subscriptionId, name, type, phase: 'pre_provision', source: type === 'secret' ? 'user_provided' : null,
      key_type: null, value: type === 'text' ? 'v' : null, sealed_value: type === 'secret' ? crypto.randomBytes(120) : null, status: 'applied', created_at: T0, updated_at: T0,
    })
    await t.db('provisioning_inputs').insert([input(ending, 'fee_recipient_key', 'secret'), input(ending, 'moniker', 'text'), input(inGrace, 'fee_recipient_key', 'secret')])
    const names = async (subscriptionId: string) => ((await t.db('provisioning_inputs').where({ subscription_id: subscriptionId }).orderBy('name').pluck('name')) as string[])

    expect(await cleanup(T0)).toMatchObject({ terminated: 1 })
    expect(await names(ending)).toEqual(['moniker'])
    expect(await names(inGrace)).toEqual(['fee_recipient_key'])
    expect(await cleanup(at(HOUR))).toMatchObject({ terminated: 1 })
    expect(await names(inGrace)).toEqual([])
  })

  it('runs a full life: active, expiring, terminated, in batches smaller than the fleet', async () => {
    const ids = await Promise.all(Array.from({ length: 7 }, (_, i) => subscription(t.db, user, { status: 'active', expires_at: T0, node_type: `t${i}` })))
    for (const id of ids) await insertNode(t.db, { subscription_id: id, chain_profile_id: 'devnet', node_type: 'full' }, T0)
    const small = (now: Date) => runSubscriptionCleanup(t.db, { now, pendingTtlMs: TTL, gracePeriodMs: GRACE, logger, batchSize: 3 })
    expect(await small(T0)).toMatchObject({ expiring: 7, terminated: 0 })
    expect(await small(at(GRACE - 1))).toMatchObject({ expiring: 0, terminated: 0 })
    expect(await small(at(GRACE))).toMatchObject({ terminated: 7, terminations_started: 7 })
    expect(await t.db('notifications').where({ kind: 'subscription_terminated' }).select('id')).toHaveLength(7)
  })

  it('runs on only one of two schedulers sharing the lease', async () => {
    let clock = at(TTL + MINUTE)
    const unpaid = await subscription(t.db, user, { status: 'pending_payment' })
    const make = (holder: string, db: Db) =>
      scheduleSubscriptionCleanup({ db, logger, pendingTtlMs: TTL, gracePeriodMs: GRACE, intervalMs: MINUTE, now: () => clock, holder, cronTime: '0 0 0 1 1 *' })
    const a = make('replica-a', t.db)
    const b = make('replica-b', t.connect())
    try {
      const ran = await Promise.all([a.tick(), b.tick()])
      expect(ran.filter(Boolean)).toHaveLength(1)
      expect(await statusOf(t.db, unpaid)).toBe('deleted')
      const holder = ((await t.db('job_leases').where({ name: SUBSCRIPTION_CLEANUP_JOB }).first('holder')) as { holder: string }).holder
      const [owner, other] = holder === 'replica-a' ? [a, b] : [b, a]
      // The holder keeps it tick after tick; the other never runs while it is held.
      clock = at(TTL + 2 * MINUTE)
      expect(await other.tick()).toBe(false)
      expect(await owner.tick()).toBe(true)
      expect(await other.tick()).toBe(false)
      // The holder dies (stops ticking): once the lease runs out the other takes over.
      clock = at(TTL + 2 * MINUTE + 2 * MINUTE)
      expect(await other.tick()).toBe(true)
      expect(await owner.tick()).toBe(false)
    } finally {
      await a.stop()
      await b.stop()
    }
  })
})
