/**
 * The control plane's consumer of payment events (payment service spec, "Events"): durable
 * consumer `main-app-payment` on `payment.*`, run through `runConsumer`, so everything below
 * happens inside the consumer's transaction together with marking the idempotency key.
 *
 * payment.completed — activation paths:
 *  (1) preferred: the customer's subscriptions linked to the payment (payment_id), or listed in
 *      the event's subscription_ids and linked to no payment yet ("linked or matched"), that are
 *      still pending_payment become active (activated_at = now, expires_at = now + duration), and
 *      each gets one node in `provisioning` and its provision workflow (key = node id). Linked
 *      subscriptions that are no longer pending (already activated) are skipped.
 *  (2) fallback, only when no subscription is linked at all (e.g. the cleanup deleted them):
 *      one active subscription per line item, placement resolved from the chain catalogue now;
 *      an item the catalogue no longer offers is logged as an error and skipped (retrying
 *      cannot make it appear, so it must not nak forever).
 * Confirmation (docs/events.md, "Security"): with `payments` set, as the daemons always set it,
 * a payment.completed first goes to the payment service (GetPayment, payment-confirmation.ts);
 * one it does not confirm activates nothing and raises a `payment_unconfirmed` incident, and
 * one it cannot confirm now is redelivered with back-off.
 * payment.failed / payment.canceled — the still-pending subscriptions linked to the payment are
 * unlinked (payment_id null) so they can be paid again, and the user gets a notification.
 * Every event also moves the `payment_requests` mirror row, when there is one.
 *
 * Exactly once (docs/subscriptions.md): the idempotency key commits with these writes; a
 * redelivery after its lifetime, or the same payment under another message id, still changes
 * nothing, because activation only moves pending_payment rows (version-locked, and the linked
 * rows locked), and the fallback runs only when nothing is linked (after it ran, its
 * subscriptions are) under a lock on the user row, which serializes it per customer.
 */
import type { ChainSource } from '../config/chain-source.js'
import { getProfile, isDuration, resolvePlacement, type SubscriptionDuration } from '../config/chains.js'
import { lockRow } from '../db/dialect.js'
import { uuidv7 } from '../db/ids.js'
import type { Db, Queryable, Tx } from '../db/knex.js'
import type { BusSubscription, EventBus } from '../events/bus.js'
import { runConsumer, type ConsumerOptions } from '../events/consumer.js'
import { UnavailableError, ValidationError } from '../errors.js'
import type { Logger } from '../log.js'
import { insertNode } from '../nodes/node-store.js'
import { createNotification } from '../notifications/notifications.js'
import { paymentEventSchema, type PaymentEvent } from '../payments/events.js'
import { startProvision } from '../provisioning/triggers.js'
import { transitionSubscription } from './lifecycle.js'
import { confirmPayment, raiseUnconfirmedPayment, type PaymentConfirmation, type PaymentLookup } from './payment-confirmation.js'
import { durationEnd } from './subscriptions.js'

export const PAYMENT_CONSUMER_DURABLE = 'main-app-payment'
export const PAYMENT_CONSUMER_SUBJECT = 'payment.*'

export const PAYMENT_SUBJECTS = { completed: 'payment.completed', failed: 'payment.failed', canceled: 'payment.canceled' } as const

/** Mirror statuses an event may still move (the payment's own terminal statuses never change). */
const OPEN_MIRROR_STATUSES = ['pending', 'processing']

export interface PaymentEventDeps {
  logger: Logger
  chains: ChainSource
}

export interface ActivatedSubscription {
  subscription_id: string
  node_id: string
  workflow_run_id: string
}

export interface ActivationResult {
  path: 'linked' | 'fallback'
  activated: ActivatedSubscription[]
  /** Linked subscriptions left alone because they were no longer pending_payment. */
  skipped_subscriptions: string[]
  /** Fallback line items the chain catalogue no longer offers. */
  skipped_items: number
}

interface SubscriptionRow {
  id: string
  user_id: string
  chain_profile_id: string
  node_type: string
  duration: string
  provider: string
  region: string
  instance_type: string
  status: string
  payment_id: string | null
  version: number
}

const SUBSCRIPTION_COLUMNS = ['id', 'user_id', 'chain_profile_id', 'node_type', 'duration', 'provider', 'region', 'instance_type', 'status', 'payment_id', 'version'] as const

function storedDuration(row: { id: string; duration: string }): SubscriptionDuration {
  if (!isDuration(row.duration)) throw new ValidationError(`subscription ${row.id} has an unknown duration "${row.duration}"`)
  return row.duration
}

/** One node in `provisioning` for the subscription and its provision workflow, in `trx`. */
export async function provisionNode(trx: Tx, sub: Pick<SubscriptionRow, 'id' | 'chain_profile_id' | 'node_type' | 'provider' | 'region' | 'instance_type'>, now: Date): Promise<ActivatedSubscription> {
  const node = await insertNode(
    trx,
    { subscription_id: sub.id, chain_profile_id: sub.chain_profile_id, node_type: sub.node_type, provider: sub.provider, region: sub.region, instance_type: sub.instance_type },
    now,
  )
  const { run } = await startProvision(trx, node.id, now)
  return { subscription_id: sub.id, node_id: node.id, workflow_run_id: run.id }
}

/** The customer's subscriptions linked to, or matched by, the payment; locked for this transaction. */
async function linkedSubscriptions(trx: Tx, event: PaymentEvent): Promise<SubscriptionRow[]> {
  const listed = event.subscription_ids.map((id) => id.toLowerCase())
  const query = trx('subscriptions')
    .where('user_id', event.customer_id.toLowerCase())
    .andWhere((q) => {
      q.where('payment_id', event.payment_id)
      if (listed.length > 0) q.orWhere((m) => m.whereIn('id', listed).whereNull('payment_id'))
    })
    .orderBy('id')
    .select(...SUBSCRIPTION_COLUMNS)
  const rows = (await lockRow(trx, query)) as Array<Record<string, unknown>>
  return rows.map((r) => ({ ...(r as unknown as SubscriptionRow), version: Number(r.version) }))
}

async function activateLinked(trx: Tx, event: PaymentEvent, linked: SubscriptionRow[], now: Date, log: Logger): Promise<ActivationResult> {
  const result: ActivationResult = { path: 'linked', activated: [], skipped_subscriptions: [], skipped_items: 0 }
  for (const sub of linked) {
    if (sub.status !== 'pending_payment') {
      log.info({ subscription_id: sub.id, status: sub.status }, 'linked subscription is no longer pending_payment; skipped')
      result.skipped_subscriptions.push(sub.id)
      continue
    }
    await transitionSubscription(trx, {
      id: sub.id,
      from: 'pending_payment',
      to: 'active',
      expectedVersion: sub.version,
      set: { activated_at: now, expires_at: durationEnd(now, storedDuration(sub)), grace_period_expires_at: null, payment_id: event.payment_id },
      now,
    })
    result.activated.push(await provisionNode(trx, sub, now))
  }
  return result
}

async function createFromLineItems(trx: Tx, event: PaymentEvent, deps: PaymentEventDeps, now: Date, log: Logger): Promise<ActivationResult> {
  const result: ActivationResult = { path: 'fallback', activated: [], skipped_subscriptions: [], skipped_items: 0 }
  const user = await trx('users').where({ id: event.customer_id.toLowerCase() }).first('id')
  if (!user) {
    log.error({ customer_id: event.customer_id }, 'payment completed for an unknown user; nothing activated (refund or assign it by hand)')
    result.skipped_items = event.items.length
    return result
  }
  const catalogue = deps.chains.current()
  for (const [index, item] of event.items.entries()) {
    let placement: ReturnType<typeof resolvePlacement>
    let duration: SubscriptionDuration
    try {
      const profile = getProfile(catalogue, item.chain_profile_id)
      placement = resolvePlacement(profile, item.node_type, item.duration)
      if (!isDuration(item.duration)) throw new ValidationError(`unknown duration "${item.duration}"`)
      duration = item.duration
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err
      log.error({ item_index: index, item, reason: err.message }, 'paid line item is no longer offered by the chain catalogue; skipped (refund or provision it by hand)')
      result.skipped_items++
      continue
    }
    const id = uuidv7(now.getTime())
    const sub = { id, chain_profile_id: item.chain_profile_id, node_type: item.node_type, ...placement }
    await trx('subscriptions').insert({
      ...sub,
      user_id: event.customer_id,
      duration,
      status: 'active',
      expires_at: durationEnd(now, duration),
      grace_period_expires_at: null,
      payment_id: event.payment_id,
      activated_at: now,
      version: 1,
      created_at: now,
      updated_at: now,
    })
    result.activated.push(await provisionNode(trx, sub, now))
  }
  return result
}

async function updateMirror(trx: Queryable, event: PaymentEvent, status: 'completed' | 'failed' | 'canceled', now: Date): Promise<void> {
  await trx('payment_requests')
    .where({ id: event.payment_id })
    .whereIn('status', OPEN_MIRROR_STATUSES)
    .update({
      status,
      failure_reason: status === 'completed' ? null : event.failure_reason,
      completed_at: status === 'completed' ? (event.completed_at ? new Date(event.completed_at) : now) : null,
      updated_at: now,
    })
}

/** payment.completed: activation path (1), else (2). */
export async function activatePayment(trx: Tx, event: PaymentEvent, deps: PaymentEventDeps, now: Date): Promise<ActivationResult> {
  const log = deps.logger.child({ payment_id: event.payment_id, customer_id: event.customer_id })
  await updateMirror(trx, event, 'completed', now)
  // The linked rows are locked (Postgres; SQLite has one writer): a second delivery of the
  // payment waits here, then finds them active and skips them.
  let linked = await linkedSubscriptions(trx, event)
  if (linked.length === 0) {
    // Row locks cannot cover "none linked yet": two deliveries under different message ids would
    // both run the fallback. The customer's row serializes them; the second then finds the
    // subscriptions the first created, linked.
    await lockRow(trx, trx('users').where({ id: event.customer_id.toLowerCase() }).first('id'))
    linked = await linkedSubscriptions(trx, event)
  }
  const result = linked.length > 0 ? await activateLinked(trx, event, linked, now, log) : await createFromLineItems(trx, event, deps, now, log)
  if (result.path === 'fallback' && result.activated.length === 0) {
    log.error({ items: event.items.length }, 'payment completed but no subscription could be activated or created')
  }
  log.info({ path: result.path, activated: result.activated, skipped_subscriptions: result.skipped_subscriptions, skipped_items: result.skipped_items }, 'payment completed: subscriptions activated')
  return result
}

/** Unlinks the payment's still-unpaid subscriptions so they can be paid again; returns how many. */
async function unlinkPending(trx: Queryable, paymentId: string, now: Date): Promise<number> {
  return trx('subscriptions').where({ payment_id: paymentId, status: 'pending_payment' }).update({ payment_id: null, version: trx.raw('version + 1'), updated_at: now })
}

function unlinkedText(count: number): string {
  if (count === 0) return ''
  return ` ${count === 1 ? 'The subscription it was for is' : `The ${count} subscriptions it was for are`} still waiting for payment and can be paid again; unpaid subscriptions are removed after a while.`
}

/**
 * A payment.failed or payment.canceled that arrives after the payment completed (events out of
 * order, or a provider's late report) changes nothing: the payment's terminal state is final.
 */
async function alreadyCompleted(trx: Queryable, paymentId: string): Promise<boolean> {
  const mirror = (await trx('payment_requests').where({ id: paymentId }).first('status')) as { status: string } | undefined
  if (mirror?.status === 'completed') return true
  const paid = await trx('subscriptions').where({ payment_id: paymentId }).whereNot({ status: 'pending_payment' }).first('id')
  return paid !== undefined
}

/** payment.failed: mirror, unlink, notify (spec: "log failure, notify user"). */
export async function recordPaymentFailed(trx: Tx, event: PaymentEvent, deps: PaymentEventDeps, now: Date): Promise<void> {
  const reason = event.failure_reason ?? 'no reason given'
  if (await alreadyCompleted(trx, event.payment_id)) {
    deps.logger.warn({ payment_id: event.payment_id, failure_reason: reason }, 'payment.failed for a payment that already completed; ignored')
    return
  }
  deps.logger.warn({ payment_id: event.payment_id, customer_id: event.customer_id, failure_reason: reason }, 'payment failed')
  await updateMirror(trx, event, 'failed', now)
  const unlinked = await unlinkPending(trx, event.payment_id, now)
  await createNotification(
    trx,
    {
      userId: event.customer_id,
      kind: 'payment_failed',
      title: 'Payment failed',
      body: `Your payment ${event.payment_id} failed: ${reason}.${unlinkedText(unlinked)}`,
      data: { payment_id: event.payment_id, failure_reason: event.failure_reason },
    },
    now,
  )
}

/** payment.canceled: mirror, unlink, notify (spec: "update records"). */
export async function recordPaymentCanceled(trx: Tx, event: PaymentEvent, deps: PaymentEventDeps, now: Date): Promise<void> {
  if (await alreadyCompleted(trx, event.payment_id)) {
    deps.logger.warn({ payment_id: event.payment_id }, 'payment.canceled for a payment that already completed; ignored')
    return
  }
  deps.logger.info({ payment_id: event.payment_id, customer_id: event.customer_id }, 'payment canceled')
  await updateMirror(trx, event, 'canceled', now)
  const unlinked = await unlinkPending(trx, event.payment_id, now)
  await createNotification(
    trx,
    {
      userId: event.customer_id,
      kind: 'payment_canceled',
      title: 'Payment canceled',
      body: `Your payment ${event.payment_id} was canceled.${unlinkedText(unlinked)}`,
      data: { payment_id: event.payment_id, failure_reason: event.failure_reason },
    },
    now,
  )
}

/** Dispatch by subject; a subject under payment.* this version does not know is acknowledged and ignored. */
export async function handlePaymentEvent(trx: Tx, subject: string, event: PaymentEvent, deps: PaymentEventDeps, now: Date): Promise<void> {
  switch (subject) {
    case PAYMENT_SUBJECTS.completed:
      await activatePayment(trx, event, deps, now)
      return
    case PAYMENT_SUBJECTS.failed:
      await recordPaymentFailed(trx, event, deps, now)
      return
    case PAYMENT_SUBJECTS.canceled:
      await recordPaymentCanceled(trx, event, deps, now)
      return
    default:
      deps.logger.info({ subject, payment_id: event.payment_id }, 'payment event subject not handled by this version; acknowledged')
  }
}

export interface PaymentConsumerDeps extends PaymentEventDeps {
  bus: EventBus
  /** The control-plane database (subscriptions, nodes, workflow runs, idempotency keys). */
  db: Db
  /** IDEMPOTENCY_KEY_TTL. */
  idempotencyTtlMs: number
  now?: () => Date
  /** Passed through to the consumer (tests shorten the back-off). */
  retryDelayMs?: ConsumerOptions<PaymentEvent>['retryDelayMs']
  onOutcome?: ConsumerOptions<PaymentEvent>['onOutcome']
  /** Messages handled at once by this process (default 1). */
  concurrency?: number
  /**
   * The payment service, to confirm each payment.completed before it activates anything. The
   * daemons always pass it; without it an event is trusted as received (tests of the
   * activation rules alone).
   */
  payments?: PaymentLookup
}

/** A decoded payment event and, for payment.completed under confirmation, the payment service's verdict. */
export type ConsumedPaymentEvent = PaymentEvent & { confirmation?: PaymentConfirmation }

/** The consumer's options, for `runConsumer` or a caller driving `createEventHandler` itself. */
export function paymentConsumerOptions(deps: PaymentConsumerDeps): ConsumerOptions<ConsumedPaymentEvent> {
  const now = deps.now ?? (() => new Date())
  const eventDeps: PaymentEventDeps = { logger: deps.logger.child({ component: 'payment-activation' }), chains: deps.chains }
  const payments = deps.payments
  const handle = async (trx: Tx, event: ConsumedPaymentEvent, envelope: { subject: string; messageId: string | undefined }): Promise<void> => {
    if (payments && envelope.subject === PAYMENT_SUBJECTS.completed) {
      const verdict = event.confirmation
      if (!verdict) throw new UnavailableError(`payment ${event.payment_id} was not confirmed with the payment service`)
      if (!verdict.confirmed) return raiseUnconfirmedPayment(trx, event, verdict.reason, envelope.messageId, now(), eventDeps.logger)
    }
    return handlePaymentEvent(trx, envelope.subject, event, eventDeps, now())
  }
  return {
    bus: deps.bus,
    db: deps.db,
    logger: deps.logger,
    durable: PAYMENT_CONSUMER_DURABLE,
    subject: PAYMENT_CONSUMER_SUBJECT,
    ttlMs: deps.idempotencyTtlMs,
    now,
    // parse() drops unknown keys: a payload cannot bring its own `confirmation`.
    decode: (payload): ConsumedPaymentEvent => paymentEventSchema.parse(payload),
    ...(payments
      ? {
          confirm: async (event: ConsumedPaymentEvent, envelope: { subject: string }): Promise<ConsumedPaymentEvent> =>
            envelope.subject === PAYMENT_SUBJECTS.completed ? { ...event, confirmation: await confirmPayment(payments, event) } : event,
        }
      : {}),
    handle,
    ...(deps.retryDelayMs ? { retryDelayMs: deps.retryDelayMs } : {}),
    ...(deps.onOutcome ? { onOutcome: deps.onOutcome } : {}),
    ...(deps.concurrency ? { concurrency: deps.concurrency } : {}),
  }
}

/** Subscribes the durable consumer `main-app-payment`; close the returned subscription to stop. */
export function startPaymentConsumer(deps: PaymentConsumerDeps): Promise<BusSubscription> {
  return runConsumer(paymentConsumerOptions(deps))
}
