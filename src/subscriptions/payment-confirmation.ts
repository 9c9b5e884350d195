/**
 * Defence in depth behind the bus permissions (docs/events.md, "Security"): before a
 * `payment.completed` activates anything, the control plane asks the payment service itself,
 * over its mutual-TLS gRPC (`GetPayment`), whether that payment exists for that customer, is
 * completed, and matches the event: amount, currency, subscriptions and line items. An event
 * that does not match is forged or corrupted: it activates nothing and raises a
 * `payment_unconfirmed` incident. A payment service that cannot answer is not a verdict: the
 * error propagates and the consumer redelivers the event with back-off.
 */
import type { Tx } from '../db/knex.js'
import { NotFoundError, UnavailableError, ValidationError } from '../errors.js'
import { raiseIncident } from '../health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../health/incident-rules.js'
import type { Logger } from '../log.js'
import type { WirePayment } from '../payments/grpc.js'
import type { PaymentEvent } from '../payments/events.js'

/** What the confirmation needs of the payment service (PaymentClient). */
export interface PaymentLookup {
  getPayment(paymentId: string, customerId: string | null): Promise<WirePayment>
}

export type PaymentConfirmation = { confirmed: true } | { confirmed: false; reason: string }

const lower = (values: readonly string[]) => values.map((v) => v.toLowerCase()).sort()
const sameList = (a: readonly string[], b: readonly string[]) => JSON.stringify(a) === JSON.stringify(b)
const itemKeys = (items: ReadonlyArray<{ chain_profile_id: string; node_type: string; duration: string; unit_price_minor: number }>) =>
  items.map((i) => `${i.chain_profile_id}|${i.node_type}|${i.duration}|${i.unit_price_minor}`).sort()

/** The first difference between the event and the payment service's record, or null. */
export function paymentMismatch(event: PaymentEvent, payment: WirePayment): string | null {
  if (payment.id.toLowerCase() !== event.payment_id.toLowerCase()) return 'the payment service answered for another payment'
  if (payment.customer_id.toLowerCase() !== event.customer_id.toLowerCase()) return 'the payment belongs to another customer'
  if (payment.status !== 'completed') return `the payment is ${payment.status}, not completed`
  if (payment.amount_minor !== event.amount_minor || payment.currency !== event.currency) {
    return `the event says ${event.amount_minor} ${event.currency}, the payment is ${payment.amount_minor} ${payment.currency}`
  }
  if (!sameList(lower(payment.subscription_ids), lower(event.subscription_ids))) return 'the event names other subscriptions than the payment'
  if (!sameList(itemKeys(payment.items), itemKeys(event.items))) return 'the event lists other line items than the payment'
  return null
}

/**
 * Asks the payment service. Not found (for this customer) or a malformed id is a verdict;
 * anything else (unreachable, deadline, refused certificate) throws, for a redelivery.
 */
export async function confirmPayment(lookup: PaymentLookup, event: PaymentEvent): Promise<PaymentConfirmation> {
  let payment: WirePayment
  try {
    payment = await lookup.getPayment(event.payment_id, event.customer_id)
  } catch (err) {
    if (err instanceof NotFoundError || err instanceof ValidationError) return { confirmed: false, reason: 'the payment service has no such payment for this customer' }
    throw err
  }
  const mismatch = paymentMismatch(event, payment)
  return mismatch ? { confirmed: false, reason: mismatch } : { confirmed: true }
}

/**
 * The incident for an unconfirmed payment event. It concerns no node: `node_id` carries the
 * payment id (one incident per payment under the dedup rule) and `subscription_id` too, so no
 * customer is notified: operators see it (`nodeplane incident list`), the customer whose name a
 * forger used does not.
 */
export async function raiseUnconfirmedPayment(trx: Tx, event: PaymentEvent, reason: string, messageId: string | undefined, now: Date, log: Logger): Promise<void> {
  log.error({ payment_id: event.payment_id, customer_id: event.customer_id, reason, message_id: messageId }, 'payment.completed not confirmed by the payment service; nothing activated')
  await raiseIncident(
    trx,
    {
      nodeId: event.payment_id,
      subscriptionId: event.payment_id,
      chainProfileId: event.items[0]?.chain_profile_id.slice(0, 100) || 'payments',
      category: 'payment_unconfirmed',
      occurredAt: now,
      title: `Unconfirmed payment.completed for payment ${event.payment_id}`,
      description: `A payment.completed event was not confirmed by the payment service (${reason}); no subscription was activated. Someone with publish rights on the bus, or a broken producer, sent it: check the NATS credentials of the payment service.`,
      metadata: {
        payment_id: event.payment_id,
        customer_id: event.customer_id,
        reason,
        message_id: messageId ?? null,
        event_amount_minor: event.amount_minor,
        event_currency: event.currency,
        event_subscription_ids: event.subscription_ids,
      },
    },
    DEFAULT_INCIDENT_SETTINGS.flapping,
    now,
  )
}

/**
 * For an orchestrator started without the payment service's client settings: every
 * payment.completed then waits (redelivered with back-off) instead of activating unconfirmed.
 */
export function unconfiguredPaymentLookup(): PaymentLookup {
  return {
    getPayment: () =>
      Promise.reject(
        new UnavailableError(
          'payment.completed cannot be confirmed: no payment service client is configured',
          'set PAYMENT_SERVICE_URL and PAYMENT_TLS_CA_FILE, PAYMENT_CLIENT_CERT_FILE, PAYMENT_CLIENT_KEY_FILE (or make the development set with `nodeplane certs dev`) and restart the orchestrator',
        ),
      ),
  }
}
