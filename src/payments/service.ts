/**
 * The payment service's operations, independent of transport: the gRPC server (grpc-server.ts)
 * is a thin binding over these. Inputs are validated here, so every transport refuses the same
 * way (ValidationError -> INVALID_ARGUMENT, NotFoundError -> NOT_FOUND, …).
 */
import { z } from 'zod'
import { fromJson, toDate, toJson } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import type { Db } from '../db/knex.js'
import { NotFoundError, UnavailableError, ValidationError } from '../errors.js'
import type { Logger } from '../log.js'
import { IdempotencyKeyReusedError, PaidAtProviderError, PaymentPreconditionError } from './errors.js'
import {
  assertSupportedCurrency,
  cryptoBaseUnits,
  DURATIONS,
  formatTokenAmount,
  MAX_ITEMS,
  parseTokenAmount,
  priceItems,
  type PricedItem,
  type PricingConfig,
} from './pricing.js'
import type { PaymentProvider, ReconcileOutcome } from './providers/provider.js'
import type { ProviderRegistry } from './providers/registry.js'
import { clearRetry, notBackingOff, recordRetry, type RetryJob } from './retries.js'
import { PAYMENT_METHODS, type CryptoCurrency, type PaymentMethod } from './states.js'
import {
  attachProviderSession,
  findPayment,
  findPaymentByIdempotencyKey,
  findPaymentForUpdate,
  insertPayment,
  transitionPayment,
  upsertCustomer,
  type AuditContext,
  type PaymentRecord,
} from './store.js'

const MAX_URL_LENGTH = 2_000
/** Reconciliation leaves a younger payment to its provider's notification ("older than a few minutes"). */
export const RECONCILE_MIN_AGE_MS = 5 * 60_000
const MAX_SUBSCRIPTIONS = 20

const httpUrl = (field: string) =>
  z
    .string({ required_error: `${field} is required` })
    .min(1, `${field} is required`)
    .max(MAX_URL_LENGTH, `${field} is longer than ${MAX_URL_LENGTH} characters`)
    .refine((value) => {
      try {
        const url = new URL(value)
        return (url.protocol === 'https:' || url.protocol === 'http:') && url.hostname.length > 0
      } catch {
        return false
      }
    }, `${field} must be an absolute http(s) URL`)

const lineItem = z.object({
  chain_profile_id: z.string().min(1, 'chain_profile_id is required').max(100),
  node_type: z.string().min(1, 'node_type is required').max(50),
  duration: z.enum(DURATIONS, { errorMap: () => ({ message: `duration must be one of ${DURATIONS.join(', ')}` }) }),
})

export const initiatePaymentInput = z.object({
  customer: z.object({
    id: z.string().refine(isUuid, 'customer.id must be the user id (UUID)'),
    email: z.string().max(320).nullish(),
    wallet_address: z.string().max(100).nullish(),
  }),
  items: z.array(lineItem).min(1, 'items must not be empty').max(MAX_ITEMS, `at most ${MAX_ITEMS} items`),
  subscription_ids: z
    .array(z.string().refine(isUuid, 'subscription_ids must be UUIDs'))
    .max(MAX_SUBSCRIPTIONS, `at most ${MAX_SUBSCRIPTIONS} subscription_ids`)
    .default([])
    .transform((ids) => ids.map((id) => id.toLowerCase()))
    .refine((ids) => new Set(ids).size === ids.length, 'subscription_ids must not repeat'),
  method: z.enum(PAYMENT_METHODS, { errorMap: () => ({ message: `method must be one of ${PAYMENT_METHODS.join(', ')}` }) }),
  crypto_currency: z.string().max(20).nullish(),
  idempotency_key: z
    .string({ required_error: 'idempotency_key is required' })
    .min(1, 'idempotency_key is required')
    .max(255, 'idempotency_key is longer than 255 characters')
    .regex(/^[\x21-\x7e]+$/, 'idempotency_key must be printable ASCII without spaces'),
  return_url: httpUrl('return_url'),
  cancel_url: httpUrl('cancel_url'),
  quote_id: z.string().nullish(),
})

/** What callers pass (strings as received); `initiatePaymentInput` validates it. */
export interface InitiatePaymentInput {
  customer: { id: string; email?: string | null; wallet_address?: string | null }
  items: ReadonlyArray<{ chain_profile_id: string; node_type: string; duration: string }>
  subscription_ids?: readonly string[]
  method: string
  crypto_currency?: string | null
  idempotency_key: string
  return_url: string
  cancel_url: string
  quote_id?: string | null
}

export const quoteInput = z.object({
  items: z.array(lineItem).min(1, 'items must not be empty').max(MAX_ITEMS, `at most ${MAX_ITEMS} items`),
  crypto_currency: z.string().max(20).nullish(),
  customer_id: z.string().refine(isUuid, 'customer_id must be a UUID').nullish(),
})

export interface QuoteInput {
  items: ReadonlyArray<{ chain_profile_id: string; node_type: string; duration: string }>
  crypto_currency?: string | null
  customer_id?: string | null
}

export interface QuoteRecord {
  id: string
  items: PricedItem[]
  amountMinor: number
  currency: string
  cryptoAmounts: Partial<Record<CryptoCurrency, string>>
  expiresAt: Date
}

export function parseInput<S extends z.ZodTypeAny>(schema: S, input: unknown): z.output<S> {
  const parsed = schema.safeParse(input)
  if (!parsed.success) {
    const first = parsed.error.issues[0]
    const all = parsed.error.issues.map((i) => (i.path.length > 0 && !i.message.startsWith(String(i.path[0])) ? `${i.path.join('.')}: ${i.message}` : i.message))
    throw new ValidationError(first ? all[0] ?? first.message : 'invalid request', all.join('; '))
  }
  return parsed.data as z.output<S>
}

/** The payment id carried as a 32-byte value: 0x + 32 zero digits + the id's 32 hex digits. */
export function memoForPayment(paymentId: string): string {
  return `0x${'0'.repeat(32)}${paymentId.replace(/-/g, '').toLowerCase()}`
}

/** The payment id in a memo, or undefined when the memo is not one of ours. */
export function paymentIdFromMemo(memo: string): string | undefined {
  const m = /^0x0{32}([0-9a-f]{32})$/i.exec(memo)
  if (!m) return undefined
  const h = (m[1] as string).toLowerCase()
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

export interface PaymentServiceDeps {
  db: Db
  logger: Logger
  /** A function so the pricing file can be reloaded without a restart. */
  pricing: () => PricingConfig
  providers: ProviderRegistry
  now?: () => Date
}

function sameRequest(payment: PaymentRecord, request: z.output<typeof initiatePaymentInput>, cryptoCurrency: string | null): boolean {
  const items = (a: { chain_profile_id: string; node_type: string; duration: string }) => `${a.chain_profile_id}/${a.node_type}/${a.duration}`
  return (
    payment.method === request.method &&
    (payment.crypto?.currency ?? null) === cryptoCurrency &&
    payment.returnUrl === request.return_url &&
    payment.cancelUrl === request.cancel_url &&
    payment.items.map(items).join(',') === request.items.map(items).join(',') &&
    [...payment.subscriptionIds].sort().join(',') === [...request.subscription_ids].sort().join(',')
  )
}

/** closeAndCancel's answer: the canceled payment, or why it was not canceled. */
type CancelOutcome = PaymentRecord | 'paid' | 'moved' | 'reattached'

export class PaymentService {
  private readonly now: () => Date
  private readonly log: Logger

  constructor(private readonly deps: PaymentServiceDeps) {
    this.now = deps.now ?? (() => new Date())
    this.log = deps.logger.child({ component: 'payments' })
  }

  methods(): PaymentMethod[] {
    return this.deps.providers.methods()
  }

  async initiatePayment(input: InitiatePaymentInput, context: AuditContext): Promise<{ payment: PaymentRecord; created: boolean }> {
    const request = parseInput(initiatePaymentInput, input)
    const pricing = this.deps.pricing()
    let cryptoCurrency: CryptoCurrency | null = null
    if (request.method === 'crypto') {
      if (!request.crypto_currency) throw new ValidationError('crypto_currency is required when method is crypto', `one of ${pricing.supportedCurrencies.join(', ')}`)
      cryptoCurrency = assertSupportedCurrency(pricing, request.crypto_currency)
    } else if (request.crypto_currency) {
      throw new ValidationError('crypto_currency is only for method crypto')
    }
    const customerId = request.customer.id.toLowerCase()

    const existing = await findPaymentByIdempotencyKey(this.deps.db, customerId, request.idempotency_key)
    if (existing) return this.replay(existing, request, cryptoCurrency, context)

    const provider = this.deps.providers.forMethod(request.method)
    const now = this.now()
    const priced: { items: PricedItem[]; amountMinor: number; currency: string; cryptoAmounts?: Partial<Record<CryptoCurrency, string>> } = request.quote_id
      ? await this.pricedFromQuote(request.quote_id, customerId, request.items, now)
      : { ...priceItems(pricing, request.items), currency: pricing.currency }
    const id = uuidv7(now.getTime())
    let crypto = null
    if (cryptoCurrency) {
      // A quote holds its exchange rate for its 15 minutes: the amount it quoted, not today's.
      const quoted = priced.cryptoAmounts?.[cryptoCurrency]
      if (request.quote_id && quoted === undefined) {
        throw new ValidationError(`quote ${request.quote_id.slice(0, 60)} has no ${cryptoCurrency} amount`, `ask for a quote with crypto_currency ${cryptoCurrency}, or one without crypto_currency (every currency)`)
      }
      const base = quoted !== undefined ? parseTokenAmount(cryptoCurrency, quoted) : cryptoBaseUnits(pricing, cryptoCurrency, priced.amountMinor)
      crypto = { currency: cryptoCurrency, amount: formatTokenAmount(cryptoCurrency, base), amountBaseUnits: base.toString(), memo: memoForPayment(id) }
    }

    let payment: PaymentRecord
    try {
      payment = await this.deps.db.transaction(async (trx) => {
        await upsertCustomer(trx, { id: customerId, email: request.customer.email ?? null, walletAddress: request.customer.wallet_address ?? null }, now)
        return insertPayment(
          trx,
          {
            id,
            customerId,
            method: request.method,
            provider: provider.name,
            amountMinor: priced.amountMinor,
            currency: priced.currency,
            idempotencyKey: request.idempotency_key,
            subscriptionIds: request.subscription_ids,
            returnUrl: request.return_url,
            cancelUrl: request.cancel_url,
            expiresAt: new Date(now.getTime() + pricing.sessionExpiryMs),
            items: priced.items,
            crypto,
          },
          context,
          now,
        )
      })
    } catch (err) {
      if (!isUniqueViolation(err)) throw err
      // A concurrent identical request won the idempotency key.
      const winner = await findPaymentByIdempotencyKey(this.deps.db, customerId, request.idempotency_key)
      if (!winner) throw err
      return this.replay(winner, request, cryptoCurrency, context)
    }

    return { payment: await this.setUpAtProvider(payment, provider, context), created: true }
  }

  /**
   * The provider's part (a checkout session, crypto instructions), attached to the pending row.
   * Idempotent per payment (the card processor is called with the payment's id as idempotency
   * key), so a retry may run it again. A provider that fails marks the payment failed.
   */
  private async setUpAtProvider(payment: PaymentRecord, provider: PaymentProvider, context: AuditContext): Promise<PaymentRecord> {
    let orphaned: string | undefined
    try {
      const session = await provider.initiatePayment(payment)
      const status = await attachProviderSession(this.deps.db, payment.id, session, this.now())
      // Only a payment that can no longer be paid: one already processing or completed came
      // through a retry that attached this same (idempotent) session, and the payer used it.
      if (status === 'canceled' || status === 'failed') orphaned = session.providerReference ?? undefined
    } catch (err) {
      this.log.warn({ err, payment_id: payment.id, provider: provider.name }, 'provider could not set up the payment; marked failed')
      await this.deps.db.transaction(async (trx) => {
        const current = await findPaymentForUpdate(trx, payment.id)
        if (current?.status !== 'pending') return
        await transitionPayment(trx, { paymentId: payment.id, to: 'failed', context, failureReason: `provider ${provider.name} could not set up the payment`, now: this.now() }, current)
      })
      throw new UnavailableError(`payment provider ${provider.name} is unavailable`, `payment ${payment.id} was marked failed; retry with a new idempotency_key`)
    }
    if (orphaned) await this.closeOrphanedSession(payment, provider, orphaned)
    return (await findPayment(this.deps.db, payment.id)) as PaymentRecord
  }

  /**
   * A session created for a payment canceled (or expired) while it was being created: cancel saw
   * no session to close, so it is closed here, before anyone can pay it. Best effort: one that
   * cannot be closed, or was paid in that instant, is logged for an operator (a refund).
   */
  private async closeOrphanedSession(payment: PaymentRecord, provider: PaymentProvider, reference: string): Promise<void> {
    try {
      if ((await provider.cancelPayment(reference)) === 'paid') {
        this.log.error({ payment_id: payment.id, provider: provider.name }, 'a session created for a payment canceled meanwhile was paid at the provider; refund it')
      }
    } catch (err) {
      this.log.error({ err, payment_id: payment.id, provider: provider.name }, 'could not close the session of a payment canceled while it was being created; it stays open at the provider until it expires')
    }
  }

  /**
   * A retry of a request already taken: the same payment. One still pending without its provider
   * session (the first call is still setting it up, or died before it could) gets it set up now,
   * so a retry never answers without a checkout URL or crypto instructions.
   */
  private async replay(
    existing: PaymentRecord,
    request: z.output<typeof initiatePaymentInput>,
    cryptoCurrency: string | null,
    context: AuditContext,
  ): Promise<{ payment: PaymentRecord; created: boolean }> {
    if (!sameRequest(existing, request, cryptoCurrency)) {
      throw new IdempotencyKeyReusedError(
        `idempotency_key was already used for payment ${existing.id} with a different request`,
        'a retry must repeat the request exactly; use a new idempotency_key for a new payment',
      )
    }
    const provider = existing.status === 'pending' && existing.providerReference === null ? this.deps.providers.byName(existing.provider) : undefined
    if (provider) return { payment: await this.setUpAtProvider(existing, provider, context), created: false }
    return { payment: existing, created: false }
  }

  private async pricedFromQuote(
    quoteId: string,
    customerId: string,
    items: ReadonlyArray<{ chain_profile_id: string; node_type: string; duration: string }>,
    now: Date,
  ): Promise<{ items: PricedItem[]; amountMinor: number; currency: string; cryptoAmounts?: Partial<Record<CryptoCurrency, string>> }> {
    const quote = await this.findQuote(quoteId)
    if (!quote || (quote.customerId !== null && quote.customerId !== customerId)) throw new NotFoundError(`quote ${quoteId.slice(0, 60)} not found`)
    if (quote.expiresAt.getTime() <= now.getTime()) {
      throw new PaymentPreconditionError(`quote ${quote.id} expired at ${quote.expiresAt.toISOString()}`, 'ask for a new quote; a quote is valid for 15 minutes')
    }
    const key = (i: { chain_profile_id: string; node_type: string; duration: string }) => `${i.chain_profile_id}/${i.node_type}/${i.duration}`
    if (quote.items.map(key).join(',') !== items.map(key).join(',')) throw new ValidationError(`quote ${quote.id} is for other items`)
    return { items: quote.items, amountMinor: quote.amountMinor, currency: quote.currency, cryptoAmounts: quote.cryptoAmounts }
  }

  private async findQuote(id: string): Promise<(QuoteRecord & { customerId: string | null }) | undefined> {
    if (!isUuid(id)) return undefined
    const row = (await this.deps.db('quotes').where({ id: id.toLowerCase() }).first()) as Record<string, unknown> | undefined
    if (!row) return undefined
    return {
      id: String(row.id),
      customerId: (row.customer_id as string | null) ?? null,
      items: fromJson<PricedItem[]>(row.items),
      amountMinor: Number(row.amount_minor),
      currency: String(row.currency),
      cryptoAmounts: fromJson<Partial<Record<CryptoCurrency, string>>>(row.crypto_amounts),
      expiresAt: toDate(row.expires_at),
    }
  }

  async getQuote(input: QuoteInput): Promise<QuoteRecord> {
    const request = parseInput(quoteInput, input)
    const pricing = this.deps.pricing()
    const priced = priceItems(pricing, request.items)
    const currencies = request.crypto_currency ? [assertSupportedCurrency(pricing, request.crypto_currency)] : pricing.supportedCurrencies
    const cryptoAmounts: Partial<Record<CryptoCurrency, string>> = {}
    for (const c of currencies) cryptoAmounts[c] = formatTokenAmount(c, cryptoBaseUnits(pricing, c, priced.amountMinor))
    const now = this.now()
    const quote: QuoteRecord = { id: uuidv7(now.getTime()), items: priced.items, amountMinor: priced.amountMinor, currency: pricing.currency, cryptoAmounts, expiresAt: new Date(now.getTime() + pricing.quoteValidityMs) }
    await this.deps.db('quotes').insert({
      id: quote.id,
      customer_id: request.customer_id?.toLowerCase() ?? null,
      items: toJson(quote.items),
      amount_minor: quote.amountMinor,
      currency: quote.currency,
      crypto_amounts: toJson(cryptoAmounts),
      expires_at: quote.expiresAt,
      created_at: now,
    })
    return quote
  }

  /** A payment; with `customerId`, another customer's payment is NOT_FOUND. */
  async getPayment(paymentId: string, customerId?: string | null): Promise<PaymentRecord> {
    const payment = isUuid(paymentId) ? await findPayment(this.deps.db, paymentId.toLowerCase()) : undefined
    if (!payment || (customerId && payment.customerId !== customerId.toLowerCase())) throw new NotFoundError(`payment ${paymentId.slice(0, 60)} not found`)
    return payment
  }

  /**
   * pending -> canceled (publishes payment.canceled); anything else is FAILED_PRECONDITION. The
   * session is closed at the provider first: canceled here while still open there, it could be
   * paid and the payer charged for a canceled payment. One the payer has paid already is not
   * canceled (FAILED_PRECONDITION; the provider's notification completes it); a provider that
   * cannot be reached is UNAVAILABLE, and the payment stays pending.
   */
  async cancelPayment(paymentId: string, customerId: string | null | undefined, reason: string, context: AuditContext): Promise<PaymentRecord> {
    const found = await this.getPayment(paymentId, customerId)
    const notPending = (status: string) => new PaymentPreconditionError(`payment ${found.id} is ${status}; only a pending payment can be canceled`)
    if (found.status !== 'pending') throw notPending(found.status)
    const outcome = await this.closeAndCancel(found, reason.slice(0, 500) || 'canceled', context)
    if (outcome === 'paid') throw new PaidAtProviderError(`payment ${found.id} has been paid at its provider; it completes as soon as the provider's notification arrives`)
    if (outcome === 'moved') throw notPending((await findPayment(this.deps.db, found.id))?.status ?? 'gone')
    // Its session was attached after it was read: start over, closing that one first.
    if (outcome === 'reattached') return this.cancelPayment(paymentId, customerId, reason, context)
    return outcome
  }

  /**
   * Session expiry (spec: 30 minutes): pending payments past `expires_at` are canceled with
   * reason "session expired", each once its session is closed at the provider (as cancelPayment).
   * Every due payment is visited, a page of `pageSize` at a time (keyset on the id), so payments
   * that cannot be expired never hold up the ones behind them. One paid at the provider
   * meanwhile is reconciled at once (its notification did not arrive); one whose provider
   * cannot be reached, or that is still not settled, backs off (retries.ts). Returns how many
   * were canceled. Run by a periodic job with a lease.
   */
  async expireSessions(pageSize = 100): Promise<number> {
    const now = this.now()
    let expired = 0
    let after: string | undefined
    for (;;) {
      const page = (await this.deps.db('payments')
        .where({ status: 'pending' })
        .where('expires_at', '<=', now)
        .modify(notBackingOff('expiry', now))
        .modify((qb) => (after === undefined ? qb : qb.where('id', '>', after)))
        .orderBy('id')
        .limit(pageSize)
        .select('id')) as Array<{ id: string }>
      for (const { id } of page) if (await this.expireOne(id)) expired++
      if (page.length < pageSize) return expired
      after = (page.at(-1) as { id: string }).id
    }
  }

  private async expireOne(id: string): Promise<boolean> {
    const payment = await findPayment(this.deps.db, id)
    if (payment?.status !== 'pending') return false
    let outcome: CancelOutcome
    try {
      outcome = await this.closeAndCancel(payment, 'session expired', { actor: 'system:session-expiry' })
    } catch (err) {
      await this.backOff(payment, 'expiry', err)
      return false
    }
    if (outcome === 'paid') {
      this.log.warn({ payment_id: id, provider: payment.provider }, 'session expired here but paid at the provider; reconciling it now')
      const reconciled = await this.reconcileOne(payment)
      if (reconciled === 'unchanged') await this.backOff(payment, 'expiry', 'paid at the provider, not settled yet')
      else if (reconciled !== 'error') await clearRetry(this.deps.db, id, 'expiry')
      return false
    }
    // 'moved' and 'reattached' (a session attached since it was read) are looked at again next run.
    if (typeof outcome !== 'object') return false
    await clearRetry(this.deps.db, id, 'expiry')
    return true
  }

  /**
   * Reconciliation (issue 15: a paid card session whose webhook never arrived stayed pending
   * forever): every pending or processing payment at least RECONCILE_MIN_AGE_MS old and past
   * its expiry, of a provider that can be asked (`reconcile`), is looked up there and moved by
   * what the provider says, through the provider's own notification rules, in one transaction
   * with the row locked: a notification arriving meanwhile moves it once, and the other finds
   * nothing left to do. Pages through all of them; one with nothing new, or whose provider
   * cannot be reached, backs off (retries.ts). Returns how many moved.
   */
  async reconcilePayments(pageSize = 100): Promise<number> {
    const now = this.now()
    const providers = this.deps.providers.providers.filter((p) => p.reconcile).map((p) => p.name)
    if (providers.length === 0) return 0
    let moved = 0
    let after: string | undefined
    for (;;) {
      const page = (await this.deps.db('payments')
        .whereIn('status', ['pending', 'processing'])
        .whereIn('provider', providers)
        .whereNotNull('provider_reference')
        .where('expires_at', '<=', now)
        .where('created_at', '<=', new Date(now.getTime() - RECONCILE_MIN_AGE_MS))
        .modify(notBackingOff('reconciliation', now))
        .modify((qb) => (after === undefined ? qb : qb.where('id', '>', after)))
        .orderBy('id')
        .limit(pageSize)
        .select('id')) as Array<{ id: string }>
      for (const { id } of page) {
        const payment = await findPayment(this.deps.db, id)
        if (!payment || (payment.status !== 'pending' && payment.status !== 'processing')) continue
        const outcome = await this.reconcileOne(payment)
        if (outcome === 'unchanged') await this.backOff(payment, 'reconciliation', 'the provider reports nothing new')
        else if (outcome !== 'error') moved++
      }
      if (page.length < pageSize) return moved
      after = (page.at(-1) as { id: string }).id
    }
  }

  /** One payment asked of its provider; `error` (logged, backed off) when the provider could not answer. */
  private async reconcileOne(payment: PaymentRecord): Promise<ReconcileOutcome | 'error'> {
    const provider = this.deps.providers.byName(payment.provider)
    if (!provider?.reconcile) return 'unchanged'
    try {
      const outcome = await provider.reconcile(payment, { actor: 'system:reconciliation' })
      if (outcome !== 'unchanged') await clearRetry(this.deps.db, payment.id, 'reconciliation')
      return outcome
    } catch (err) {
      await this.backOff(payment, 'reconciliation', err)
      return 'error'
    }
  }

  private async backOff(payment: PaymentRecord, job: RetryJob, cause: unknown): Promise<void> {
    const error = cause instanceof Error ? cause.message : String(cause)
    const { attempts, retryAt } = await recordRetry(this.deps.db, payment.id, job, error, this.now())
    this.log.warn(
      { payment_id: payment.id, provider: payment.provider, job, attempts, retry_at: retryAt.toISOString(), ...(cause instanceof Error ? { err: cause } : { reason: error }) },
      `${job === 'expiry' ? 'could not expire the payment' : 'could not reconcile the payment'}; trying again later`,
    )
  }

  /**
   * Closes the payment's session at its provider, then cancels the payment if it is still pending
   * with that same session (a session attached since `payment` was read is open: `reattached`).
   * `paid`: the payer paid already, nothing canceled. A provider that cannot be reached is an
   * UnavailableError, the payment left pending.
   */
  private async closeAndCancel(payment: PaymentRecord, failureReason: string, context: AuditContext): Promise<CancelOutcome> {
    let closed: 'closed' | 'paid'
    try {
      closed = await this.closeAtProvider(payment)
    } catch (err) {
      this.log.warn({ err, payment_id: payment.id, provider: payment.provider }, 'could not close the session at the provider; the payment stays pending')
      throw new UnavailableError(`payment provider ${payment.provider} could not close the payment's session`, 'the payment is still pending; try again')
    }
    if (closed === 'paid') return 'paid'
    return this.deps.db.transaction(async (trx) => {
      const current = await findPaymentForUpdate(trx, payment.id)
      if (current?.status !== 'pending') return 'moved'
      if (current.providerReference !== payment.providerReference) return 'reattached'
      return transitionPayment(trx, { paymentId: payment.id, to: 'canceled', context, failureReason, now: this.now() }, current)
    })
  }

  /** The provider's cancel (nothing to close without a provider session). */
  private async closeAtProvider(payment: PaymentRecord): Promise<'closed' | 'paid'> {
    if (!payment.providerReference) return 'closed'
    const provider = this.deps.providers.byName(payment.provider)
    return provider ? provider.cancelPayment(payment.providerReference) : 'closed'
  }
}

