/**
 * The whole purchase journey through HTTP on the real stack in one process (in-process bus), on
 * SQLite and Postgres: subscribe -> pay (test provider) -> payment.completed -> active -> node
 * provisioned (real agent, devnet chain) -> expiry -> grace -> terminated, with the shared clock
 * moved, not waited for; and a failed payment leaving the subscription payable again. Exactly
 * one node and one provision run per subscription throughout; nothing half-written.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { toDate } from '../../src/db/dialect.js'
import { createLocalBus, type LocalBus } from '../../src/events/local-bus.js'
import { countUnpublished } from '../../src/events/outbox.js'
import { PROVISION_WORKFLOW } from '../../src/provisioning/provision.js'
import { TERMINATE_WORKFLOW } from '../../src/provisioning/terminate.js'
import { PAYMENT_CONSUMER_DURABLE } from '../../src/subscriptions/activation.js'
import { durationEnd } from '../../src/subscriptions/subscriptions.js'
import { findRunByKey } from '../../src/workflows/index.js'
import { DIALECTS } from '../helpers/db.js'
import { waitFor } from '../helpers/ports.js'
import { count, GRACE_PERIOD_MS, payBody, PAY_ITEM, startPaymentStack, type PaymentStack } from '../helpers/payment-stack.js'

interface Subscription {
  id: string
  status: string
  payment_id: string | null
  expires_at: string
  grace_period_expires_at: string | null
}
interface Payment {
  id: string
  status: string
  subscription_ids: string[]
  failure_reason?: string | null
}
interface Node {
  id: string
  subscription_id: string
  state: string
}
interface Notification {
  id: string
  kind: string
  data: Record<string, unknown>
}

describe.each(DIALECTS)('the purchase journey on the in-process stack, %s', (dialect) => {
  let stack: PaymentStack | undefined
  let bus: LocalBus | undefined

  afterEach(async () => {
    await stack?.stop()
    await bus?.close()
    stack = undefined
    bus = undefined
  })

  async function start(options: { lifecycle: boolean; failureRate?: number }): Promise<PaymentStack> {
    bus = createLocalBus()
    stack = await startPaymentStack({ dialect, paymentBus: bus, controlBus: bus, lifecycle: options.lifecycle, ...(options.failureRate !== undefined ? { failureRate: options.failureRate } : {}) })
    return stack
  }

  const call = (s: PaymentStack, method: string, url: string, body?: unknown) => s.api.call(method, url, { bearer: s.key, ...(body !== undefined ? { body } : {}) })
  const subscription = async (s: PaymentStack, id: string) => {
    const res = await call(s, 'GET', `/api/v1/subscriptions/${id}`)
    expect(res.status).toBe(200)
    return res.body as Subscription
  }
  const nodesOf = async (s: PaymentStack, id: string) => {
    const res = await call(s, 'GET', `/api/v1/nodes?subscription_id=${id}`)
    expect(res.status).toBe(200)
    return (res.body as { items: Node[] }).items
  }
  const notifications = async (s: PaymentStack) => {
    const res = await call(s, 'GET', '/api/v1/notifications')
    expect(res.status).toBe(200)
    return (res.body as { items: Notification[] }).items
  }
  /** Exactly one node and one provision run for the subscription, and no other in the database. */
  const expectOneNode = async (s: PaymentStack, subscriptionId: string): Promise<Node> => {
    const nodes = await nodesOf(s, subscriptionId)
    expect(nodes).toHaveLength(1)
    const node = nodes[0] as Node
    expect(await count(s.db, 'nodes')).toBe(1)
    expect(await count(s.db, 'workflow_runs', { workflow_name: PROVISION_WORKFLOW })).toBe(1)
    expect(await count(s.db, 'workflow_runs', { workflow_name: PROVISION_WORKFLOW, workflow_key: node.id })).toBe(1)
    return node
  }
  const outboxesDrained = async (s: PaymentStack) => {
    await waitFor(async () => (await countUnpublished(s.db)) === 0 && (await countUnpublished(s.paymentsDb)) === 0, 'both outboxes published')
    await waitFor(async () => bus?.pending(PAYMENT_CONSUMER_DURABLE) === 0, 'every payment event acked')
  }

  it('subscribe, pay, activate, provision, expire, grace, terminate', { timeout: 120_000 }, async () => {
    const s = await start({ lifecycle: true })
    const { root } = s.lifecycle as NonNullable<PaymentStack['lifecycle']>

    const created = await call(s, 'POST', '/api/v1/subscriptions', { ...PAY_ITEM })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    const sub = created.body as Subscription
    expect(sub).toMatchObject({ status: 'pending_payment', payment_id: null })

    const paid = await call(s, 'POST', '/api/v1/payments', payBody([sub.id], 'journey-1'))
    expect(paid.status, JSON.stringify(paid.body)).toBe(201)
    const payment = paid.body as Payment
    expect(payment).toMatchObject({ status: 'pending', subscription_ids: [sub.id] })
    const beforeSettle = s.clock.now()

    // Test provider settles -> payment.completed via the payments outbox and relay -> consumer.
    const active = await waitFor(async () => {
      const current = await subscription(s, sub.id)
      return current.status === 'active' ? current : undefined
    }, 'the subscription to become active')
    expect(active.payment_id).toBe(payment.id)
    const row = (await s.db('subscriptions').where({ id: sub.id }).first('activated_at', 'expires_at')) as { activated_at: unknown; expires_at: unknown }
    const activatedAt = toDate(row.activated_at)
    expect(activatedAt.getTime()).toBeGreaterThanOrEqual(beforeSettle.getTime())
    expect(activatedAt.getTime()).toBeLessThanOrEqual(s.clock.ms)
    expect(active.expires_at).toBe(durationEnd(activatedAt, '1w').toISOString())
    expect(toDate(row.expires_at).getTime() - activatedAt.getTime()).toBe(7 * 86_400_000)
    const pending = await expectOneNode(s, sub.id)
    expect(['provisioning', 'syncing']).toContain(pending.state)

    // The provision workflow brings the node up on a real agent running the devnet chain.
    const node = await waitFor(async () => {
      const [current] = await nodesOf(s, sub.id)
      if (current?.state === 'failed') throw new Error('node failed')
      return current?.state === 'syncing' ? current : undefined
    }, 'the node to reach syncing', 90_000, 200)
    expect(node.id).toBe(pending.id)
    // The node reaches syncing in the run's last step; the run records its end just after.
    const provisioned = await waitFor(async () => {
      const run = await findRunByKey(s.db, PROVISION_WORKFLOW, node.id)
      return run?.status === 'completed' || run?.status === 'failed' ? run : undefined
    }, 'the provision run to end', 10_000, 50)
    expect(provisioned.status, provisioned.error ?? '').toBe('completed')
    expect(fs.readdirSync(root)).toEqual([`local-${node.id}`])
    expect(await count(s.db, 'node_keys', { node_id: node.id })).toBeGreaterThan(0)

    const shown = await call(s, 'GET', `/api/v1/payments/${payment.id}`)
    expect(shown).toMatchObject({ status: 200, body: { id: payment.id, status: 'completed' } })
    expect(await s.db('payment_requests').where({ id: payment.id }).first('status')).toEqual({ status: 'completed' })
    // The payment's whole story in its own database: the audit trail and one event, published.
    expect(await s.paymentsDb('payment_events').where({ payment_id: payment.id }).orderBy('id').pluck('event_type')).toEqual(['payment.created', 'payment.processing', 'payment.completed'])
    expect(await s.paymentsDb('outbox').orderBy('id').pluck('subject')).toEqual(['payment.completed'])
    await outboxesDrained(s)
    await expectOneNode(s, sub.id)

    // Past expires_at: expiring, grace from now, the node keeps running, the user is told.
    expect(await s.evaluator.subscriptionCleanup.tick()).toBe(true)
    expect((await subscription(s, sub.id)).status).toBe('active')
    s.clock.advance(Date.parse(active.expires_at) - s.clock.ms + 60_000)
    const expiredAt = s.clock.ms
    expect(await s.evaluator.subscriptionCleanup.tick()).toBe(true)
    const expiring = await subscription(s, sub.id)
    expect(expiring.status).toBe('expiring')
    const graceEnds = Date.parse(expiring.grace_period_expires_at as string)
    expect(graceEnds).toBeGreaterThanOrEqual(expiredAt + GRACE_PERIOD_MS)
    expect(graceEnds).toBeLessThanOrEqual(s.clock.ms + GRACE_PERIOD_MS)
    expect((await nodesOf(s, sub.id)).map((n) => n.state)).toEqual(['syncing'])
    expect(fs.readdirSync(root)).toEqual([`local-${node.id}`])
    expect(await findRunByKey(s.db, TERMINATE_WORKFLOW, node.id)).toBeNull()
    const expiringNotes = (await notifications(s)).filter((n) => n.kind === 'subscription_expiring')
    expect(expiringNotes).toHaveLength(1)
    expect(expiringNotes[0]?.data).toMatchObject({ subscription_id: sub.id, grace_period_expires_at: expiring.grace_period_expires_at })

    // A pass within the grace period changes nothing.
    s.clock.advance(GRACE_PERIOD_MS / 2)
    expect(await s.evaluator.subscriptionCleanup.tick()).toBe(true)
    expect((await subscription(s, sub.id)).status).toBe('expiring')

    // Past the grace period: terminated, the terminate workflow removes host and keys.
    s.clock.advance(graceEnds - s.clock.ms + 60_000)
    expect(await s.evaluator.subscriptionCleanup.tick()).toBe(true)
    expect((await subscription(s, sub.id)).status).toBe('terminated')
    const terminated = await waitFor(async () => {
      const run = await findRunByKey(s.db, TERMINATE_WORKFLOW, node.id)
      return run && (run.status === 'completed' || run.status === 'failed') ? run : undefined
    }, 'the terminate workflow to finish', 60_000, 200)
    expect(terminated.status, terminated.error ?? '').toBe('completed')
    expect(terminated.result).toMatchObject({ node_id: node.id, outcome: 'terminated', skipped_steps: [] })
    expect((await nodesOf(s, sub.id)).map((n) => [n.id, n.state])).toEqual([[node.id, 'terminated']])
    expect(fs.readdirSync(root)).toEqual([])
    expect(await count(s.db, 'node_keys', { node_id: node.id })).toBe(0)
    expect(await count(s.db, 'node_data_keys', { node_id: node.id })).toBe(0)
    const kinds = (await notifications(s)).map((n) => n.kind).sort()
    expect(kinds).toEqual(['subscription_expiring', 'subscription_terminated'])

    // Another pass starts nothing more; one node, one provision run, one terminate run.
    expect(await s.evaluator.subscriptionCleanup.tick()).toBe(true)
    await expectOneNode(s, sub.id)
    expect(await count(s.db, 'workflow_runs', { workflow_name: TERMINATE_WORKFLOW })).toBe(1)
    expect(await count(s.db, 'subscriptions')).toBe(1)
    await outboxesDrained(s)
  })

  it('a payment the test provider fails: payment_failed, the subscription unlinked and payable again, nothing provisioned', async () => {
    const s = await start({ lifecycle: false, failureRate: 1 })
    const created = await call(s, 'POST', '/api/v1/subscriptions', { ...PAY_ITEM })
    expect(created.status).toBe(201)
    const sub = created.body as Subscription

    const first = await call(s, 'POST', '/api/v1/payments', payBody([sub.id], 'fails-1'))
    expect(first.status, JSON.stringify(first.body)).toBe(201)
    const payment = first.body as Payment
    expect((await subscription(s, sub.id)).payment_id).toBe(payment.id)
    // Linked to an open payment: paying again is refused until it ends.
    expect((await call(s, 'POST', '/api/v1/payments', payBody([sub.id], 'fails-2'))).status).toBe(409)

    const note = await waitFor(async () => (await notifications(s)).find((n) => n.kind === 'payment_failed'), 'the payment_failed notification')
    expect(note.data).toMatchObject({ payment_id: payment.id, failure_reason: expect.stringContaining('test provider') })
    expect(await subscription(s, sub.id)).toMatchObject({ status: 'pending_payment', payment_id: null })
    expect(await call(s, 'GET', `/api/v1/payments/${payment.id}`)).toMatchObject({ status: 200, body: { status: 'failed' } })
    expect(await s.db('payment_requests').where({ id: payment.id }).first('status')).toEqual({ status: 'failed' })
    expect(await count(s.db, 'nodes')).toBe(0)
    expect(await count(s.db, 'workflow_runs')).toBe(0)
    await outboxesDrained(s)

    // Payable again, with a new idempotency key.
    const again = await call(s, 'POST', '/api/v1/payments', payBody([sub.id], 'fails-3'))
    expect(again.status, JSON.stringify(again.body)).toBe(201)
    const second = again.body as Payment
    expect(second.id).not.toBe(payment.id)
    expect(await subscription(s, sub.id)).toMatchObject({ status: 'pending_payment', payment_id: second.id })
    await waitFor(async () => (await notifications(s)).filter((n) => n.kind === 'payment_failed').length === 2, 'the second failure notified')
    expect(await subscription(s, sub.id)).toMatchObject({ status: 'pending_payment', payment_id: null })
    expect(await count(s.db, 'nodes')).toBe(0)
    expect(await count(s.db, 'workflow_runs')).toBe(0)
    expect(await count(s.db, 'subscriptions')).toBe(1)
    await outboxesDrained(s)
  })
})
