/**
 * Payloads of the events the payment service publishes on stream PAYMENTS (docs/events.md,
 * "payment.*"). One shape for all three subjects; the control plane's consumer parses it with
 * `paymentEventSchema`. Fields are only ever added, so an older consumer keeps parsing.
 */
import { z } from 'zod'
import type { PaymentRecord } from './store.js'
import { PAYMENT_METHODS, PAYMENT_STATUSES } from './states.js'

export const PAYMENT_EVENT_VERSION = 1

export const paymentEventSchema = z.object({
  version: z.number().int().min(1),
  payment_id: z.string().uuid(),
  /** The control-plane user id (the customer mirror's id). */
  customer_id: z.string().uuid(),
  status: z.enum(PAYMENT_STATUSES),
  method: z.enum(PAYMENT_METHODS),
  provider: z.string(),
  amount_minor: z.number().int(),
  currency: z.string(),
  subscription_ids: z.array(z.string().uuid()),
  items: z.array(
    z.object({
      chain_profile_id: z.string(),
      node_type: z.string(),
      duration: z.string(),
      unit_price_minor: z.number().int(),
    }),
  ),
  failure_reason: z.string().nullable(),
  completed_at: z.string().nullable(),
  occurred_at: z.string(),
})

export type PaymentEvent = z.infer<typeof paymentEventSchema>

export function paymentEventPayload(payment: PaymentRecord, now: Date): PaymentEvent {
  return {
    version: PAYMENT_EVENT_VERSION,
    payment_id: payment.id,
    customer_id: payment.customerId,
    status: payment.status,
    method: payment.method,
    provider: payment.provider,
    amount_minor: payment.amountMinor,
    currency: payment.currency,
    subscription_ids: payment.subscriptionIds,
    items: payment.items.map((i) => ({ chain_profile_id: i.chain_profile_id, node_type: i.node_type, duration: i.duration, unit_price_minor: i.unit_price_minor })),
    failure_reason: payment.failureReason,
    completed_at: payment.completedAt?.toISOString() ?? null,
    occurred_at: now.toISOString(),
  }
}
