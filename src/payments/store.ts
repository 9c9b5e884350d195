/**
 * Payment records in the payment service's own database: payments, their line items, the audit
 * trail and the customer mirror. `transitionPayment` is the only way a status changes: it checks
 * the state table (states.ts), bumps the optimistic-lock version, appends an audit event and,
 * for completed / failed / canceled, writes the `payment.*` outbox row, all in the caller's
 * transaction.
 */
import { fromJson, lockRow, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError } from '../errors.js'
import { PaymentPreconditionError } from './errors.js'
import { enqueueEvent } from '../events/outbox.js'
import { paymentEventPayload } from './events.js'
import type { PricedItem } from './pricing.js'
import type { ProviderSession } from './providers/provider.js'
import { PAYMENT_TRANSITIONS, canTransitionPayment, subjectForStatus, type CryptoCurrency, type PaymentMethod, type PaymentStatus } from './states.js'

export interface CryptoDetails {
  currency: CryptoCurrency
  /** Whole tokens, decimal string. */
  amount: string
  amountBaseUnits: string
  receiverAddress: string
  /** 0x + 64 hex digits: the payment id left-padded to 32 bytes. */
  memo: string
  contractAddress: string | null
  chainId: number | null
  txHash: string | null
  blockNumber: number | null
}

export interface PaymentRecord {
  id: string
  customerId: string
  status: PaymentStatus
  method: PaymentMethod
  provider: string
  providerReference: string | null
  amountMinor: number
  currency: string
  idempotencyKey: string
  subscriptionIds: string[]
  returnUrl: string
  cancelUrl: string
  checkoutUrl: string | null
  crypto: CryptoDetails | null
  failureReason: string | null
  expiresAt: Date
  completedAt: Date | null
  createdAt: Date
  updatedAt: Date
  version: number
  items: PricedItem[]
}

/** Who caused a change, for the audit trail (spec: actor, event_type, request_id, IP, details). */
export interface AuditContext {
  actor: string
  requestId?: string | null
  ip?: string | null
}

type Row = Record<string, unknown>

function paymentFromRow(row: Row, items: PricedItem[]): PaymentRecord {
  const crypto: CryptoDetails | null = row.crypto_currency
    ? {
        currency: String(row.crypto_currency) as CryptoCurrency,
        amount: String(row.crypto_amount),
        amountBaseUnits: String(row.crypto_amount_base_units ?? ''),
        receiverAddress: String(row.crypto_receiver_address ?? ''),
        memo: String(row.crypto_memo ?? ''),
        contractAddress: (row.crypto_contract_address as string | null) ?? null,
        chainId: row.crypto_chain_id === null || row.crypto_chain_id === undefined ? null : Number(row.crypto_chain_id),
        txHash: (row.crypto_tx_hash as string | null) ?? null,
        blockNumber: row.crypto_block_number === null || row.crypto_block_number === undefined ? null : Number(row.crypto_block_number),
      }
    : null
  return {
    id: String(row.id),
    customerId: String(row.customer_id),
    status: row.status as PaymentStatus,
    method: row.method as PaymentMethod,
    provider: String(row.provider),
    providerReference: (row.provider_reference as string | null) ?? null,
    amountMinor: Number(row.amount_minor),
    currency: String(row.currency),
    idempotencyKey: String(row.idempotency_key),
    subscriptionIds: fromJson<string[]>(row.subscription_ids),
    returnUrl: String(row.return_url),
    cancelUrl: String(row.cancel_url),
    checkoutUrl: (row.checkout_url as string | null) ?? null,
    crypto,
    failureReason: (row.failure_reason as string | null) ?? null,
    expiresAt: toDate(row.expires_at),
    completedAt: toDateOrNull(row.completed_at),
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    version: Number(row.version),
    items,
  }
}

async function itemsOf(db: Queryable, paymentId: string): Promise<PricedItem[]> {
  const rows = (await db('payment_line_items').where({ payment_id: paymentId }).orderBy('position')) as Row[]
  return rows.map((r) => ({
    chain_profile_id: String(r.chain_profile_id),
    node_type: String(r.node_type),
    duration: String(r.duration),
    unit_price_minor: Number(r.unit_price_minor),
  }))
}

async function loadPayment(db: Queryable, row: Row | undefined): Promise<PaymentRecord | undefined> {
  return row ? paymentFromRow(row, await itemsOf(db, String(row.id))) : undefined
}

export async function findPayment(db: Queryable, id: string): Promise<PaymentRecord | undefined> {
  return loadPayment(db, (await db('payments').where({ id }).first()) as Row | undefined)
}

/** Locks the payment row for the rest of the transaction (Postgres). */
export async function findPaymentForUpdate(trx: Queryable, id: string): Promise<PaymentRecord | undefined> {
  return loadPayment(trx, (await lockRow(trx, trx('payments').where({ id }).first())) as Row | undefined)
}

export async function findPaymentByIdempotencyKey(db: Queryable, customerId: string, key: string): Promise<PaymentRecord | undefined> {
  return loadPayment(db, (await db('payments').where({ customer_id: customerId, idempotency_key: key }).first()) as Row | undefined)
}

export async function findPaymentByProviderReference(db: Queryable, provider: string, reference: string): Promise<PaymentRecord | undefined> {
  return loadPayment(db, (await db('payments').where({ provider, provider_reference: reference }).first()) as Row | undefined)
}

/** Locks the payment row with this provider reference for the rest of the transaction (Postgres). */
export async function findPaymentByProviderReferenceForUpdate(trx: Queryable, provider: string, reference: string): Promise<PaymentRecord | undefined> {
  return loadPayment(trx, (await lockRow(trx, trx('payments').where({ provider, provider_reference: reference }).first())) as Row | undefined)
}

export async function findPaymentByMemo(db: Queryable, memo: string): Promise<PaymentRecord | undefined> {
  return loadPayment(db, (await db('payments').where({ crypto_memo: memo.toLowerCase() }).first()) as Row | undefined)
}

export interface CustomerMirror {
  id: string
  email?: string | null
  walletAddress?: string | null
}

/** Upserts the mirror of a control-plane user (spec: customer id equal to the user id). */
export async function upsertCustomer(db: Queryable, customer: CustomerMirror, now: Date): Promise<void> {
  const values: Row = { updated_at: now }
  if (customer.email !== undefined) values.email = customer.email
  if (customer.walletAddress !== undefined) values.wallet_address = customer.walletAddress
  await db('customers')
    .insert({ id: customer.id, email: customer.email ?? null, wallet_address: customer.walletAddress ?? null, created_at: now, updated_at: now })
    .onConflict('id')
    .merge(values)
}

function paymentEventRow(paymentId: string | null, eventType: string, context: AuditContext, details: Record<string, unknown>, now: Date): Row {
  return {
    payment_id: paymentId,
    actor: context.actor.slice(0, 100),
    event_type: eventType,
    request_id: context.requestId?.slice(0, 100) ?? null,
    ip: context.ip?.slice(0, 64) ?? null,
    details: toJson(details),
    created_at: now,
  }
}

export async function recordPaymentEvent(db: Queryable, paymentId: string | null, eventType: string, context: AuditContext, details: Record<string, unknown>, now: Date): Promise<void> {
  await db('payment_events').insert(paymentEventRow(paymentId, eventType, context, details, now))
}

export interface NewPayment {
  id: string
  customerId: string
  method: PaymentMethod
  provider: string
  amountMinor: number
  currency: string
  idempotencyKey: string
  subscriptionIds: string[]
  returnUrl: string
  cancelUrl: string
  expiresAt: Date
  items: PricedItem[]
  /** What is owed in crypto; the provider adds where to send it (attachProviderSession). */
  crypto?: Pick<CryptoDetails, 'currency' | 'amount' | 'amountBaseUnits' | 'memo'> | null
}

/** Inserts a `pending` payment with its line items and a `payment.created` audit event. */
export async function insertPayment(trx: Queryable, payment: NewPayment, context: AuditContext, now: Date): Promise<PaymentRecord> {
  await trx('payments').insert({
    id: payment.id,
    customer_id: payment.customerId,
    status: 'pending',
    method: payment.method,
    provider: payment.provider,
    amount_minor: payment.amountMinor,
    currency: payment.currency,
    idempotency_key: payment.idempotencyKey,
    subscription_ids: toJson(payment.subscriptionIds),
    return_url: payment.returnUrl,
    cancel_url: payment.cancelUrl,
    crypto_currency: payment.crypto?.currency ?? null,
    crypto_amount: payment.crypto?.amount ?? null,
    crypto_amount_base_units: payment.crypto?.amountBaseUnits ?? null,
    crypto_memo: payment.crypto?.memo.toLowerCase() ?? null,
    expires_at: payment.expiresAt,
    version: 1,
    created_at: now,
    updated_at: now,
  })
  await trx('payment_line_items').insert(
    payment.items.map((item, position) => ({
      id: uuidv7(now.getTime()),
      payment_id: payment.id,
      position,
      chain_profile_id: item.chain_profile_id,
      node_type: item.node_type,
      duration: item.duration,
      unit_price_minor: item.unit_price_minor,
      currency: payment.currency,
      created_at: now,
    })),
  )
  await recordPaymentEvent(
    trx,
    payment.id,
    'payment.created',
    context,
    { status: 'pending', method: payment.method, provider: payment.provider, amount_minor: payment.amountMinor, currency: payment.currency, items: payment.items.length },
    now,
  )
  return (await findPayment(trx, payment.id)) as PaymentRecord
}

/**
 * What the provider learned when it set the payment up (checkout session, crypto instructions),
 * attached to a payment still pending; returns the payment's status (`pending` when attached).
 * One no longer pending (canceled while the session was being created, or already moved on by a
 * retry that attached the same session) keeps only the reference, for tracing: no checkout url
 * or crypto instructions are handed out for it.
 */
export async function attachProviderSession(trx: Queryable, paymentId: string, session: ProviderSession, now: Date): Promise<string | undefined> {
  const values: Row = { updated_at: now }
  if (session.providerReference !== undefined) values.provider_reference = session.providerReference
  if (session.checkoutUrl !== undefined) values.checkout_url = session.checkoutUrl
  if (session.crypto) {
    values.crypto_receiver_address = session.crypto.receiverAddress
    values.crypto_contract_address = session.crypto.contractAddress
    values.crypto_chain_id = session.crypto.chainId
  }
  const attached = await trx('payments').where({ id: paymentId, status: 'pending' }).update(values)
  if (attached > 0) return 'pending'
  if (session.providerReference !== undefined) await trx('payments').where({ id: paymentId }).whereNull('provider_reference').update({ provider_reference: session.providerReference, updated_at: now })
  const row = (await trx('payments').where({ id: paymentId }).first('status')) as { status: string } | undefined
  return row?.status
}

export interface PaymentTransition {
  paymentId: string
  to: PaymentStatus
  context: AuditContext
  /** Audit event type; default `payment.<to>`. */
  eventType?: string
  details?: Record<string, unknown>
  failureReason?: string
  /** On-chain evidence (crypto provider). */
  cryptoTx?: { txHash: string; blockNumber: number }
  /**
   * A status passed through on the way (pending -> processing -> completed): each move is
   * checked and audited (`payment.<via>`), the row written once.
   */
  via?: PaymentStatus
  now: Date
}


function describeAllowed(from: PaymentStatus): string {
  const next = PAYMENT_TRANSITIONS[from]
  return next.length === 0 ? `${from} is final` : `from ${from} a payment can become ${next.join(' or ')}`
}

/**
 * Moves a payment along the state table, in the caller's transaction (lock first on Postgres).
 * A move the table does not allow throws PaymentPreconditionError (409, FAILED_PRECONDITION) and writes nothing; callers
 * replaying an event check the status first and skip instead. `locked`: the payment as this
 * transaction already read it under its lock (findPaymentForUpdate, or a previous transition's
 * result), so it is not read again.
 */
export async function transitionPayment(trx: Queryable, transition: PaymentTransition, locked?: PaymentRecord): Promise<PaymentRecord> {
  const payment = locked ?? (await findPaymentForUpdate(trx, transition.paymentId))
  if (!payment) throw new NotFoundError(`payment ${transition.paymentId} not found`)
  const moves: Array<[PaymentStatus, PaymentStatus]> = transition.via
    ? [
        [payment.status, transition.via],
        [transition.via, transition.to],
      ]
    : [[payment.status, transition.to]]
  for (const [from, to] of moves) {
    if (!canTransitionPayment(from, to)) throw new PaymentPreconditionError(`payment ${payment.id} is ${from} and cannot become ${to}`, describeAllowed(from))
  }
  const now = transition.now
  const version = payment.version + moves.length
  const values: Row = { status: transition.to, version, updated_at: now }
  if (transition.to === 'completed') values.completed_at = now
  if (transition.failureReason !== undefined) values.failure_reason = transition.failureReason.slice(0, 2000)
  if (transition.cryptoTx) {
    values.crypto_tx_hash = transition.cryptoTx.txHash
    values.crypto_block_number = transition.cryptoTx.blockNumber
  }
  const updated = await trx('payments').where({ id: payment.id, version: payment.version }).update(values)
  if (updated !== 1) throw new ConflictError(`payment ${payment.id} changed concurrently; retry`)
  const last = moves.length - 1
  await trx('payment_events').insert(
    moves.map(([from, to], i) =>
      paymentEventRow(
        payment.id,
        i === last ? (transition.eventType ?? `payment.${to}`) : `payment.${to}`,
        transition.context,
        { from, to, ...(i === last && transition.failureReason ? { failure_reason: transition.failureReason } : {}), ...(transition.details ?? {}) },
        now,
      ),
    ),
  )
  // The row as just written, without reading it back: the versioned update above proved
  // `payment` was current, and each statement is a round trip of a payment's completion.
  const next: PaymentRecord = {
    ...payment,
    status: transition.to,
    version,
    updatedAt: now,
    completedAt: transition.to === 'completed' ? now : payment.completedAt,
    failureReason: values.failure_reason === undefined ? payment.failureReason : String(values.failure_reason),
    crypto: payment.crypto && transition.cryptoTx ? { ...payment.crypto, txHash: transition.cryptoTx.txHash, blockNumber: transition.cryptoTx.blockNumber } : payment.crypto,
  }
  const subject = subjectForStatus(transition.to)
  if (subject) await enqueueEvent(trx, { subject, payload: paymentEventPayload(next, now) }, now)
  return next
}

/** pending -> processing -> completed in one go, for providers that learn of success at once. */
export async function completePayment(trx: Queryable, paymentId: string, context: AuditContext, now: Date, details: Record<string, unknown> = {}, cryptoTx?: { txHash: string; blockNumber: number }): Promise<PaymentRecord> {
  const current = await findPaymentForUpdate(trx, paymentId)
  if (!current) throw new NotFoundError(`payment ${paymentId} not found`)
  return completeLockedPayment(trx, current, context, now, details, cryptoTx)
}

/** As completePayment, for a caller that has locked the payment in `trx` (findPaymentForUpdate) already. */
export function completeLockedPayment(trx: Queryable, locked: PaymentRecord, context: AuditContext, now: Date, details: Record<string, unknown> = {}, cryptoTx?: { txHash: string; blockNumber: number }): Promise<PaymentRecord> {
  return transitionPayment(trx, { paymentId: locked.id, to: 'completed', ...(locked.status === 'pending' ? { via: 'processing' as const } : {}), context, details, now, ...(cryptoTx ? { cryptoTx } : {}) }, locked)
}

/** Payment audit trail, oldest first. */
export async function paymentEvents(db: Queryable, paymentId: string): Promise<Array<{ actor: string; eventType: string; requestId: string | null; ip: string | null; details: Record<string, unknown>; createdAt: Date }>> {
  const rows = (await db('payment_events').where({ payment_id: paymentId }).orderBy('id')) as Row[]
  return rows.map((r) => ({
    actor: String(r.actor),
    eventType: String(r.event_type),
    requestId: (r.request_id as string | null) ?? null,
    ip: (r.ip as string | null) ?? null,
    details: fromJson<Record<string, unknown>>(r.details),
    createdAt: toDate(r.created_at),
  }))
}
