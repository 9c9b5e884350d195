/**
 * Paying for subscriptions from the control plane (spec: "POST /api/v1/payments request"): the
 * linked subscriptions are checked (they exist, are the caller's, are `pending_payment`, and the
 * items are exactly what they are for), the payment service is asked over mTLS gRPC, then every
 * listed subscription gets the payment id and the payment is mirrored in `payment_requests`.
 *
 * A retry with the same idempotency_key reaches the payment service's own idempotency and gets
 * the same payment back; linking and mirroring are idempotent too, so a retry after a crash half
 * way completes the job.
 */
import { fromJson, lockRow, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import type { Logger } from '../log.js'
import type { PaymentClient } from '../payments/client.js'
import { PaidAtProviderError } from '../payments/errors.js'
import type { WirePayment } from '../payments/grpc.js'
import type { PaymentMethod, PaymentStatus } from '../payments/states.js'

export interface LineItem {
  chain_profile_id: string
  node_type: string
  duration: string
}

export interface PaymentRequestBody {
  items: LineItem[]
  subscription_ids?: string[] | undefined
  method: string
  crypto_currency?: string | undefined
  idempotency_key: string
  return_url: string
  cancel_url: string
  quote_id?: string | undefined
}

export interface PaymentView {
  id: string
  user_id: string
  status: PaymentStatus
  method: PaymentMethod
  provider: string
  amount_minor: number
  currency: string
  items: Array<LineItem & { unit_price_minor: number }>
  subscription_ids: string[]
  checkout_url: string | null
  crypto: {
    currency: string
    amount: string
    amount_base_units: string
    receiver_address: string
    memo: string
    contract_address: string | null
    chain_id: number | null
  } | null
  failure_reason: string | null
  idempotency_key: string
  return_url: string
  cancel_url: string
  expires_at: string
  created_at: string
  updated_at: string
  completed_at: string | null
}

export function paymentViewFromWire(p: WirePayment): PaymentView {
  return {
    id: p.id,
    user_id: p.customer_id,
    status: p.status as PaymentStatus,
    method: p.method as PaymentMethod,
    provider: p.provider,
    amount_minor: p.amount_minor,
    currency: p.currency,
    items: p.items.map((i) => ({ chain_profile_id: i.chain_profile_id, node_type: i.node_type, duration: i.duration, unit_price_minor: i.unit_price_minor })),
    subscription_ids: p.subscription_ids,
    checkout_url: p.checkout_url || null,
    crypto: p.crypto
      ? {
          currency: p.crypto.currency,
          amount: p.crypto.amount,
          amount_base_units: p.crypto.amount_base_units,
          receiver_address: p.crypto.receiver_address,
          memo: p.crypto.memo,
          contract_address: p.crypto.contract_address || null,
          chain_id: p.crypto.chain_id || null,
        }
      : null,
    failure_reason: p.failure_reason || null,
    idempotency_key: p.idempotency_key,
    return_url: p.return_url,
    cancel_url: p.cancel_url,
    expires_at: p.expires_at,
    created_at: p.created_at,
    updated_at: p.updated_at,
    completed_at: p.completed_at || null,
  }
}

/** The mirror row (`payment_requests`), as listed by GET /api/v1/payments. */
export interface PaymentRequestSummary {
  id: string
  user_id: string
  status: PaymentStatus
  method: PaymentMethod
  crypto_currency: string | null
  amount_minor: number
  currency: string
  subscription_ids: string[]
  failure_reason: string | null
  created_at: string
  updated_at: string
  completed_at: string | null
}

export const PAYMENT_REQUEST_COLUMNS = ['id', 'user_id', 'status', 'method', 'crypto_currency', 'amount_minor', 'currency', 'subscription_ids', 'failure_reason', 'created_at', 'updated_at', 'completed_at'] as const

export function paymentRequestFromRow(row: Record<string, unknown>): PaymentRequestSummary {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    status: String(row.status) as PaymentStatus,
    method: String(row.method) as PaymentMethod,
    crypto_currency: (row.crypto_currency as string | null) ?? null,
    amount_minor: Number(row.amount_minor),
    currency: String(row.currency),
    subscription_ids: fromJson<string[]>(row.subscription_ids),
    failure_reason: (row.failure_reason as string | null) ?? null,
    created_at: toDate(row.created_at).toISOString(),
    updated_at: toDate(row.updated_at).toISOString(),
    completed_at: toDateOrNull(row.completed_at)?.toISOString() ?? null,
  }
}

export async function findPaymentRequest(db: Queryable, id: string): Promise<PaymentRequestSummary | undefined> {
  const row = (await db('payment_requests').where({ id }).first(...PAYMENT_REQUEST_COLUMNS)) as Record<string, unknown> | undefined
  return row ? paymentRequestFromRow(row) : undefined
}

/** Payments still able to complete: a subscription linked to one of these cannot be re-linked. */
const OPEN_STATUSES = ['pending', 'processing']

const itemKey = (i: LineItem) => `${i.chain_profile_id}/${i.node_type}/${i.duration}`

/** 409 when the subscription is linked to a payment that can still complete. */
async function refuseOpenLink(db: Queryable, subscriptionId: string, paymentId: string): Promise<void> {
  const linked = await findPaymentRequest(db, paymentId)
  if (linked?.status === 'completed') {
    throw new ConflictError(`subscription ${subscriptionId} is paid by payment ${paymentId}`, 'it becomes active as soon as the payment is processed; do not pay again')
  }
  if (!linked || OPEN_STATUSES.includes(linked.status)) {
    throw new ConflictError(
      `subscription ${subscriptionId} is linked to payment ${paymentId}, which is still open`,
      'wait for it to complete or expire, or cancel it (nodeplane payment cancel, or POST /api/v1/payments/{id}/cancel), then pay again',
    )
  }
}

async function checkLinks(db: Queryable, userId: string, ids: readonly string[], items: readonly LineItem[]): Promise<void> {
  if (ids.length === 0) return
  const rows = (await db('subscriptions').whereIn('id', ids).select('id', 'user_id', 'status', 'payment_id', 'chain_profile_id', 'node_type', 'duration')) as Array<Record<string, string | null>>
  for (const id of ids) {
    const sub = rows.find((r) => r.id === id)
    // Another user's subscription answers exactly like a missing one.
    if (!sub || sub.user_id !== userId) throw new NotFoundError(`subscription ${id} not found`, 'subscription_ids: every id must be one of your subscriptions')
    if (sub.status !== 'pending_payment') {
      throw new ConflictError(`subscription ${id} is ${sub.status}`, 'subscription_ids: only pending_payment subscriptions can be paid')
    }
    if (sub.payment_id) await refuseOpenLink(db, id, sub.payment_id)
  }
  const wanted = [...items].map(itemKey).sort()
  const linked = ids.map((id) => rows.find((r) => r.id === id) as Record<string, string>).map((r) => itemKey(r as unknown as LineItem)).sort()
  if (wanted.join(',') !== linked.join(',')) {
    throw new ValidationError('items must be exactly what the linked subscriptions are for', `subscriptions are for: ${linked.join(', ')}; items: ${wanted.join(', ')}`)
  }
}

export interface RequestPaymentDeps {
  db: Db
  client: PaymentClient
  logger: Logger
  now: () => Date
}

export interface Caller {
  id: string
  email: string | null
  wallet_address: string | null
}

export async function requestPayment(deps: RequestPaymentDeps, caller: Caller, body: PaymentRequestBody, context: { requestId: string; ip: string }): Promise<{ payment: PaymentView; created: boolean }> {
  const { db } = deps
  const ids = [...new Set((body.subscription_ids ?? []).map((id) => id.toLowerCase()))]
  if (ids.length !== (body.subscription_ids ?? []).length) throw new ValidationError('subscription_ids must not repeat')
  // A retry: the first request's links and mirror committed together, and whatever happened to
  // the subscriptions since (paid, unlinked) does not change the answer, which is the same payment.
  // The payment service compares the request and answers 409 if it differs.
  const replay = (await db('payment_requests').where({ user_id: caller.id, idempotency_key: body.idempotency_key }).first('id')) as { id: string } | undefined
  if (!replay) await checkLinks(db, caller.id, ids, body.items)

  const { payment, created } = await deps.client.initiatePayment({
    customer: { id: caller.id, email: caller.email ?? '', wallet_address: caller.wallet_address ?? '' },
    items: body.items,
    subscription_ids: ids,
    method: body.method,
    crypto_currency: body.crypto_currency ?? null,
    idempotency_key: body.idempotency_key,
    return_url: body.return_url,
    cancel_url: body.cancel_url,
    ...(body.quote_id ? { quote_id: body.quote_id } : {}),
    context: { request_id: context.requestId, ip: context.ip, actor: `user:${caller.id}` },
  })

  if (replay && !created) {
    await refreshPaymentRequest(db, payment, deps.now())
    return { payment: paymentViewFromWire(payment), created }
  }
  let activatedMeanwhile = false
  try {
    activatedMeanwhile = await linkAndMirror(db, caller, body, ids, payment, deps.now())
  } catch (err) {
    if (!(err instanceof ConflictError)) throw err
    const { live, paid } = await settleLostLink(deps, caller, payment, context)
    if (live?.status !== 'completed') throw new ConflictError(err.message, lostLinkAdvice(live, payment, paid))
    // The payment completed while its links were being written: its event activated the
    // subscriptions (linked or matched, or the line-item fallback when one was gone), so the
    // money is not lost and the answer is the completed payment, not a refusal.
    deps.logger.warn({ payment_id: payment.id, reason: err.message }, 'payment completed before its subscriptions were linked; answered with the completed payment')
    await insertMirror(db, caller, body, live, deps.now())
    await refreshPaymentRequest(db, live, deps.now())
    return { payment: paymentViewFromWire(live), created }
  }
  if (!activatedMeanwhile) return { payment: paymentViewFromWire(payment), created }
  // Its event activated a subscription before the link: the answer and the mirror follow the live payment.
  const live = await deps.client.getPayment(payment.id, caller.id).catch((err: unknown) => {
    deps.logger.warn({ err, payment_id: payment.id }, 'could not read the payment back after its subscriptions were activated')
    return payment
  })
  await refreshPaymentRequest(db, live, deps.now())
  return { payment: paymentViewFromWire(live), created }
}

/**
 * Links the subscriptions to the payment and writes the mirror row, in one transaction. Returns
 * whether a subscription had already been activated by this very payment (its payment.completed
 * arrived first, through the "matched" path). A subscription moved on by anything else, or linked
 * to another open payment meanwhile, is a ConflictError: the caller settles the payment.
 */
async function linkAndMirror(db: Db, caller: Caller, body: PaymentRequestBody, ids: readonly string[], payment: WirePayment, now: Date): Promise<boolean> {
  return db.transaction(async (trx) => {
    let activatedMeanwhile = false
    for (const id of ids) {
      const sub = (await lockRow(trx, trx('subscriptions').where({ id }).first('status', 'payment_id', 'version'))) as { status: string; payment_id: string | null; version: number } | undefined
      if (!sub || sub.status !== 'pending_payment') {
        // `payment.status` is as initiated (pending): the payment may have completed since.
        if (sub && sub.payment_id === payment.id) {
          activatedMeanwhile = true
          continue
        }
        throw new ConflictError(`subscription ${id} changed while the payment was being set up`)
      }
      if (sub.payment_id === payment.id) continue
      // Another request may have linked it since checkLinks read it.
      if (sub.payment_id) await refuseOpenLink(trx, id, sub.payment_id)
      await trx('subscriptions').where({ id, version: sub.version }).update({ payment_id: payment.id, version: sub.version + 1, updated_at: now })
    }
    await insertMirror(trx, caller, body, payment, now)
    return activatedMeanwhile
  })
}

async function insertMirror(db: Queryable, caller: Caller, body: PaymentRequestBody, payment: WirePayment, now: Date): Promise<void> {
  await db('payment_requests')
    .insert({
      id: payment.id,
      user_id: caller.id,
      idempotency_key: body.idempotency_key,
      method: payment.method,
      crypto_currency: payment.crypto?.currency ?? null,
      status: payment.status,
      amount_minor: payment.amount_minor,
      currency: payment.currency,
      subscription_ids: toJson(payment.subscription_ids),
      failure_reason: payment.failure_reason || null,
      completed_at: payment.completed_at ? new Date(payment.completed_at) : null,
      created_at: new Date(payment.created_at),
      updated_at: now,
    })
    .onConflict('id')
    .ignore()
}

/**
 * A payment whose links could not be written: cancel it while it is open, and return the
 * payment as it is afterwards (undefined when the payment service cannot say). A cancel that
 * fails because the payment completed in the meantime shows up as `completed` here.
 */
async function settleLostLink(
  deps: RequestPaymentDeps,
  caller: Caller,
  payment: WirePayment,
  context: { requestId: string; ip: string },
): Promise<{ live: WirePayment | undefined; paid: boolean }> {
  const ctx = { request_id: context.requestId, ip: context.ip, actor: `user:${caller.id}` }
  let paid = false
  if (OPEN_STATUSES.includes(payment.status)) {
    try {
      return { live: await deps.client.cancelPayment(payment.id, caller.id, 'a linked subscription changed while the payment was set up', ctx), paid }
    } catch (err) {
      paid = err instanceof PaidAtProviderError
      deps.logger.warn({ err, payment_id: payment.id }, paid ? 'the payment was paid already; not canceled' : 'could not cancel the payment; reading its status')
    }
  }
  const live = await deps.client.getPayment(payment.id, caller.id).catch((err: unknown) => {
    deps.logger.warn({ err, payment_id: payment.id }, 'could not read the payment; it expires on its own')
    return undefined
  })
  return { live, paid }
}

/** What the 409 of a lost link says happened to the payment (never "canceled" unless it was). */
function lostLinkAdvice(live: WirePayment | undefined, initiated: WirePayment, paidAtProvider: boolean): string {
  const expires = `it expires at ${(live ?? initiated).expires_at}`
  if (paidAtProvider && (live === undefined || OPEN_STATUSES.includes(live.status))) {
    // The cancel was refused because the money is on its way: "do not pay it" would be false.
    const confirmed = initiated.method === 'crypto' ? 'the transfer is confirmed' : 'the card processor confirms it'
    return `payment ${initiated.id} has been paid and completes once ${confirmed}: do not pay again; follow it with \`nodeplane payment show --id ${initiated.id}\``
  }
  switch (live?.status) {
    case 'canceled':
      return `payment ${initiated.id} was canceled and nothing was charged; try again`
    case 'failed':
      return `payment ${initiated.id} failed${live.failure_reason ? ` (${live.failure_reason})` : ''}; try again`
    case 'pending':
    case 'processing':
      return `payment ${initiated.id} could not be canceled and is still open (${expires}): do not pay it; try again with a new payment`
    default:
      return `the state of payment ${initiated.id} is unknown (the payment service did not answer): check it with \`nodeplane payment show --id ${initiated.id}\` before paying again; if open, ${expires}`
  }
}

/** Follows the live payment into the mirror (GET /payments/{id}, cancel). Never moves a terminal status back. */
export async function refreshPaymentRequest(db: Queryable, payment: WirePayment, now: Date): Promise<void> {
  await db('payment_requests')
    .where({ id: payment.id })
    .whereIn('status', OPEN_STATUSES)
    .update({ status: payment.status, failure_reason: payment.failure_reason || null, completed_at: payment.completed_at ? new Date(payment.completed_at) : null, updated_at: now })
}
