/**
 * The card provider (payment service spec, "Provider adapter operations": `card`): a hosted
 * checkout session at the card processor, completed by the processor's signed webhook. Every
 * call to the processor goes through its official SDK (`stripe`); `apiUrl` points the SDK at
 * another host (a local fake in tests). No card data ever reaches us.
 *
 * Webhooks: the signature (`Provider-Signature`, scheme `t=…,v1=…`) is verified over the raw
 * bytes before anything is parsed or written. A verified event is recorded in
 * `provider_events` in the same transaction as the payment moves it causes, so a replayed
 * event id is answered `duplicate` and changes nothing. Outcomes: docs/payments-card.md.
 */
import Stripe from 'stripe'
import { z } from 'zod'
import { isUniqueViolation } from '../../db/errors.js'
import { isUuid } from '../../db/ids.js'
import type { Queryable } from '../../db/knex.js'
import type { Logger } from '../../log.js'
import { redactProviderError, type Redaction } from '../provider-errors.js'
import { canTransitionPayment, type PaymentStatus } from '../states.js'
import {
  completeLockedPayment,
  findPaymentByProviderReferenceForUpdate,
  findPaymentForUpdate,
  recordPaymentEvent,
  transitionPayment,
  type AuditContext,
  type PaymentRecord,
} from '../store.js'
import type { PaymentProvider, ProviderContext, ProviderPaymentStatus, ProviderSession, ReconcileOutcome, WebhookRequest, WebhookResult } from './provider.js'

export const CARD_PROVIDER_NAME = 'card'

/** The four event types the spec names; every other type is answered 200 `ignored`. */
export const CARD_WEBHOOK_EVENTS = [
  'checkout.session.completed',
  'checkout.session.async_payment_succeeded',
  'checkout.session.async_payment_failed',
  'checkout.session.expired',
] as const
type CardWebhookEvent = (typeof CARD_WEBHOOK_EVENTS)[number]

/** What the webhook endpoint answers in `outcome` (docs/payments-card.md). */
export type CardWebhookOutcome =
  | 'completed'
  | 'processing'
  | 'failed'
  | 'canceled'
  | 'amount_mismatch'
  | 'duplicate'
  | 'ignored'
  | 'ignored_state'
  | 'ignored_session'
  | 'unknown_payment'
  | 'missing_signature'
  | 'invalid_signature'
  | 'malformed_payload'
  | 'invalid_event'

export interface CardProviderOptions extends ProviderContext {
  /** CARD_PROVIDER_SECRET_KEY (never logged). */
  secretKey: string
  /** CARD_PROVIDER_WEBHOOK_SECRET (never logged). */
  webhookSecret: string
  /** CARD_PROVIDER_API_URL, e.g. http://127.0.0.1:12111; default the processor's real API. */
  apiUrl?: string
  /** SDK retries of a failed call (same idempotency key); the SDK's default is 2. */
  maxNetworkRetries?: number
  /**
   * Per-call timeout; default 8 s. The SDK's own 80 s would hold an InitiatePayment call too long:
   * three attempts (and their backoff) stay under the control plane's PAYMENT_CALL_TIMEOUT (30 s),
   * so the control plane never gives up on a call that then succeeds.
   */
  timeoutMs?: number
}

/**
 * How far a webhook's signed timestamp may be from our clock, either way. The SDK checks only
 * the past (a timestamp in the future passes it), so the future is checked here.
 */
export const SIGNATURE_TOLERANCE_SECONDS = 300
/** The readiness probe asks for a session that cannot exist: a 404 proves the processor answers and takes our key. */
const PROBE_SESSION_ID = 'cs_nodeplane_readiness_probe'
const PROBE_TIMEOUT_MS = 2_000
/** The processor refuses a session expiring sooner than 30 minutes or later than 24 hours out. */
const MIN_SESSION_LIFETIME_MS = 31 * 60_000
const MAX_SESSION_LIFETIME_MS = 24 * 3_600_000 - 60_000
const DEFAULT_TIMEOUT_MS = 8_000

const ACTOR = `provider:${CARD_PROVIDER_NAME}`

/** The fields of a checkout session the webhook relies on; anything else is passed through. */
const sessionSchema = z.object({
  id: z.string().min(1).max(255),
  object: z.literal('checkout.session'),
  status: z.string().nullable().optional(),
  payment_status: z.string(),
  amount_total: z.number().int().nullable().optional(),
  currency: z.string().nullable().optional(),
  client_reference_id: z.string().nullable().optional(),
  metadata: z.record(z.string()).nullable().optional(),
})
type SessionFields = z.infer<typeof sessionSchema>

const eventSchema = z.object({
  id: z.string().min(1).max(255),
  type: z.string().min(1).max(100),
  data: z.object({ object: z.unknown() }),
})

/** The SDK's host / port / protocol settings for an API base URL. */
export function sdkHostConfig(apiUrl: string | undefined): Pick<Stripe.StripeConfig, 'host' | 'port' | 'protocol'> {
  if (!apiUrl) return {}
  const url = new URL(apiUrl)
  const protocol = url.protocol === 'http:' ? 'http' : 'https'
  return { host: url.hostname, port: url.port || (protocol === 'http' ? 80 : 443), protocol }
}

export function productName(item: { chain_profile_id: string; node_type: string; duration: string }): string {
  return `${item.chain_profile_id} ${item.node_type} node, ${item.duration}`
}

/** What a checkout session's state means for the payment. */
export function statusOfSession(session: { status: string | null; payment_status: string }): ProviderPaymentStatus {
  if (session.status === 'open') return 'pending'
  if (session.status === 'expired') return 'canceled'
  if (session.status === 'complete') {
    if (session.payment_status === 'paid' || session.payment_status === 'no_payment_required') return 'completed'
    if (session.payment_status === 'unpaid') return 'processing'
  }
  return 'unknown'
}

/** The payment moves an event asks for, in order; `failureReason` for the last one. */
interface Plan {
  steps: PaymentStatus[]
  outcome: CardWebhookOutcome
  failureReason?: string
}

export class CardProvider implements PaymentProvider {
  readonly name = CARD_PROVIDER_NAME
  readonly methods = ['card'] as const
  private readonly stripe: Stripe
  private readonly log: Logger
  private readonly redactions: readonly Redaction[]

  constructor(private readonly options: CardProviderOptions) {
    this.redactions = [[options.secretKey, '<CARD_PROVIDER_SECRET_KEY>']]
    this.stripe = new Stripe(options.secretKey, {
      ...sdkHostConfig(options.apiUrl),
      maxNetworkRetries: options.maxNetworkRetries ?? 2,
      timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      telemetry: false,
    })
    this.log = options.logger.child({ component: 'payments', provider: CARD_PROVIDER_NAME })
  }

  // What these four throw reaches logs and payment_retries.last_error: the processor's error, redacted.
  initiatePayment(payment: PaymentRecord): Promise<ProviderSession> {
    return this.redacting(this.createSession(payment))
  }

  getPaymentStatus(providerReference: string): Promise<ProviderPaymentStatus> {
    return this.redacting(this.sessionStatus(providerReference))
  }

  cancelPayment(providerReference: string): Promise<'closed' | 'paid'> {
    return this.redacting(this.expireSession(providerReference))
  }

  reconcile(payment: PaymentRecord, context: AuditContext): Promise<ReconcileOutcome> {
    return this.redacting(this.reconcileSession(payment, context))
  }

  private async redacting<T>(work: Promise<T>): Promise<T> {
    try {
      return await work
    } catch (err) {
      throw err instanceof Stripe.errors.StripeError ? redactProviderError(err, 'card processor', this.redactions) : err
    }
  }

  private async createSession(payment: PaymentRecord): Promise<ProviderSession> {
    const now = this.options.now().getTime()
    const expiresAt = Math.min(Math.max(payment.expiresAt.getTime(), now + MIN_SESSION_LIFETIME_MS), now + MAX_SESSION_LIFETIME_MS)
    const session = await this.stripe.checkout.sessions.create(
      {
        mode: 'payment',
        line_items: payment.items.map((item) => ({
          price_data: { currency: payment.currency.toLowerCase(), unit_amount: item.unit_price_minor, product_data: { name: productName(item) } },
          quantity: 1,
        })),
        success_url: payment.returnUrl,
        cancel_url: payment.cancelUrl,
        client_reference_id: payment.id,
        metadata: { payment_id: payment.id },
        expires_at: Math.floor(expiresAt / 1000),
      },
      // The SDK's own retries and a retried InitiatePayment reuse this key: one session per payment.
      { idempotencyKey: `payment:${payment.id}` },
    )
    if (!session.url) throw new Error(`checkout session ${session.id} has no url`)
    this.log.info({ payment_id: payment.id, session_id: session.id }, 'checkout session created')
    return { providerReference: session.id, checkoutUrl: session.url }
  }

  private async sessionStatus(providerReference: string): Promise<ProviderPaymentStatus> {
    try {
      return statusOfSession(await this.stripe.checkout.sessions.retrieve(providerReference))
    } catch (err) {
      if (err instanceof Stripe.errors.StripeInvalidRequestError && err.statusCode === 404) return 'unknown'
      throw err
    }
  }

  /** Readiness: the processor answers and accepts our secret key (no retries, a short deadline). */
  async health(): Promise<{ ok: true } | { ok: false; error: string }> {
    try {
      await this.stripe.checkout.sessions.retrieve(PROBE_SESSION_ID, {}, { maxNetworkRetries: 0, timeout: PROBE_TIMEOUT_MS })
      return { ok: true }
    } catch (err) {
      if (err instanceof Stripe.errors.StripeInvalidRequestError && err.statusCode === 404) return { ok: true }
      // The SDK's messages are not echoed: a processor's message could quote what we sent.
      if (err instanceof Stripe.errors.StripeAuthenticationError) return { ok: false, error: 'the card processor refused the secret key (CARD_PROVIDER_SECRET_KEY)' }
      if (err instanceof Stripe.errors.StripeConnectionError) return { ok: false, error: `the card processor is unreachable (no answer within ${PROBE_TIMEOUT_MS} ms)` }
      const status = err instanceof Stripe.errors.StripeError && err.statusCode !== undefined ? ` (HTTP ${err.statusCode})` : ''
      return { ok: false, error: `the card processor answered with an error${status}` }
    }
  }

  private async expireSession(providerReference: string): Promise<'closed' | 'paid'> {
    try {
      await this.stripe.checkout.sessions.expire(providerReference)
      return 'closed'
    } catch (err) {
      if (!(err instanceof Stripe.errors.StripeInvalidRequestError)) throw err
      // Only an open session can be expired: one already expired is closed; a complete one was
      // paid (or its asynchronous payment is under way), and its webhook settles the payment.
      const session = await this.stripe.checkout.sessions.retrieve(providerReference)
      if (session.status === 'open') throw err
      return session.status === 'complete' ? 'paid' : 'closed'
    }
  }

  async handleWebhook(request: WebhookRequest): Promise<WebhookResult> {
    const log = this.log.child({ requestId: request.requestId })
    if (!request.signature) {
      log.warn('card webhook without a Provider-Signature header refused')
      return { status: 401, outcome: 'missing_signature' }
    }
    let raw: unknown
    try {
      raw = this.stripe.webhooks.constructEvent(
        request.payload,
        request.signature,
        this.options.webhookSecret,
        SIGNATURE_TOLERANCE_SECONDS,
        undefined,
        this.options.now().getTime(),
      )
    } catch (err) {
      if (err instanceof Stripe.errors.StripeSignatureVerificationError) {
        // The error object carries the header and the payload: log only why.
        log.warn({ reason: err.message.split('\n')[0]?.trim() }, 'card webhook with an invalid signature refused')
        return { status: 401, outcome: 'invalid_signature' }
      }
      // The signature matched, so the processor sent it; the bytes are not JSON.
      log.warn('signed card webhook is not valid JSON')
      return { status: 400, outcome: 'malformed_payload' }
    }

    const signedAt = signedTimestamp(request.signature)
    if (signedAt === undefined || Math.abs(this.options.now().getTime() / 1000 - signedAt) > SIGNATURE_TOLERANCE_SECONDS) {
      log.warn({ reason: 'timestamp more than 5 minutes from our clock' }, 'card webhook with an invalid signature refused')
      return { status: 401, outcome: 'invalid_signature' }
    }

    const event = eventSchema.safeParse(raw)
    if (!event.success) {
      log.warn('signed card webhook is not an event object')
      return { status: 400, outcome: 'invalid_event' }
    }
    const { id: eventId, type } = event.data
    if (!(CARD_WEBHOOK_EVENTS as readonly string[]).includes(type)) {
      log.debug({ event_id: eventId, event_type: type }, 'card webhook event type not handled; ignored')
      return { status: 200, outcome: 'ignored' }
    }
    const session = sessionSchema.safeParse(event.data.data.object)
    if (!session.success) {
      log.warn({ event_id: eventId, event_type: type }, 'card webhook event does not carry a checkout session')
      return { status: 400, outcome: 'invalid_event' }
    }

    const context: AuditContext = { actor: ACTOR, requestId: request.requestId, ip: request.ip }
    const eventLog = log.child({ event_id: eventId, event_type: type, session_id: session.data.id })
    let paymentId: string | undefined
    try {
      // The payment is found and locked in the transaction that moves it: a second delivery of
      // the same event waits on the lock, then finds the event recorded.
      const outcome = await this.options.db.transaction(async (trx) => {
        const payment = await this.lockedPaymentFor(trx, session.data)
        if (!payment) return undefined
        paymentId = payment.id
        return this.apply(trx, { eventId, type: type as CardWebhookEvent, session: session.data, payment, context, log: eventLog, details: { event_id: eventId, event_type: type, session_id: session.data.id } })
      })
      if (outcome === undefined || paymentId === undefined) {
        // Another integration on the same processor account, or a payment deleted since.
        eventLog.info('card webhook for no payment of ours; ignored')
        return { status: 200, outcome: 'unknown_payment' }
      }
      if (outcome === 'duplicate') eventLog.info({ payment_id: paymentId }, 'card webhook event seen before: not processed again')
      else eventLog.info({ payment_id: paymentId, outcome }, 'card webhook processed')
      return { status: 200, outcome, paymentId }
    } catch (err) {
      // Another delivery of the same event committed its row first.
      if (!isUniqueViolation(err) || paymentId === undefined) throw err
      eventLog.info({ payment_id: paymentId }, 'card webhook event seen before: not processed again')
      return { status: 200, outcome: 'duplicate', paymentId }
    }
  }

  /** By our id on the session (set at creation, so found even before the reference is stored), else by the session id; locked. */
  private async lockedPaymentFor(trx: Queryable, session: SessionFields): Promise<PaymentRecord | undefined> {
    const ours = session.client_reference_id ?? session.metadata?.payment_id
    const payment = ours && isUuid(ours) ? await findPaymentForUpdate(trx, ours.toLowerCase()) : await findPaymentByProviderReferenceForUpdate(trx, this.name, session.id)
    return payment?.provider === this.name ? payment : undefined
  }

  /**
   * Reconciliation: the session as the processor has it now, applied as the webhook that would
   * have reported it (same plan, amount check and state table). Nothing new at the processor
   * (an open session, an asynchronous payment still under way) writes nothing.
   */
  private async reconcileSession(payment: PaymentRecord, context: AuditContext): Promise<ReconcileOutcome> {
    if (!payment.providerReference) return 'unchanged'
    const session = sessionSchema.parse(await this.stripe.checkout.sessions.retrieve(payment.providerReference))
    const type = eventTypeForSession(session)
    if (!type) return 'unchanged'
    const log = this.log.child({ payment_id: payment.id, session_id: session.id })
    const details = { source: 'reconciliation', session_id: session.id, session_status: session.status ?? null, payment_status: session.payment_status }
    const outcome = await this.options.db.transaction(async (trx) => {
      const locked = await findPaymentForUpdate(trx, payment.id)
      return locked ? this.apply(trx, { type, session, payment: locked, context, log, details }) : 'unchanged'
    })
    if (outcome === 'completed' || outcome === 'processing' || outcome === 'failed' || outcome === 'canceled') {
      log.info({ outcome }, 'card payment reconciled with the processor (its webhook did not arrive)')
      return outcome
    }
    if (outcome === 'amount_mismatch') return 'failed'
    return 'unchanged'
  }

  /**
   * Moves the payment as an event asks. A webhook (`eventId`) is recorded in `provider_events`
   * first and writes `webhook.ignored` when it moves nothing; reconciliation (no event id)
   * records nothing when nothing moves, since it asks again later.
   */
  private async apply(
    trx: Queryable,
    input: { eventId?: string; type: CardWebhookEvent; session: SessionFields; payment: PaymentRecord; context: AuditContext; log: Logger; details: Record<string, unknown> },
  ): Promise<CardWebhookOutcome> {
    const { eventId, type, session, payment, context, log, details } = input
    const now = this.options.now()
    if (eventId !== undefined) {
      // One statement: an event recorded before inserts nothing.
      const recorded = await trx('provider_events')
        .insert({ provider: this.name, event_id: eventId, event_type: type, payment_id: payment.id, processed_at: now })
        .onConflict(['provider', 'event_id'])
        .ignore()
        .returning('event_id')
      if (recorded.length === 0) return 'duplicate'
    }

    const ignore = async (reason: string, outcome: CardWebhookOutcome): Promise<CardWebhookOutcome> => {
      if (eventId !== undefined) await recordPaymentEvent(trx, payment.id, 'webhook.ignored', context, { ...details, status: payment.status, reason }, now)
      return outcome
    }

    if (payment.providerReference && payment.providerReference !== session.id) {
      return ignore(`session ${session.id} is not the payment's session ${payment.providerReference}`, 'ignored_session')
    }
    const plan = planFor(type, session, payment)
    if (plan.steps.length === 0) return ignore(`${type} with payment_status ${session.payment_status} is not understood`, 'ignored')
    let from = payment.status
    for (const to of plan.steps) {
      if (!canTransitionPayment(from, to)) return ignore(`${type} asks for ${plan.steps.join(' -> ')}, but the payment is ${payment.status}`, 'ignored_state')
      from = to
    }
    // Someone may have been charged a different amount: an operator has to look.
    if (plan.outcome === 'amount_mismatch') log.error({ payment_id: payment.id, reason: plan.failureReason }, 'card payment amount does not match; payment failed')

    if (plan.steps.at(-1) === 'completed') {
      await completeLockedPayment(trx, payment, context, now, details)
      return plan.outcome
    }
    let locked = payment
    for (const [i, to] of plan.steps.entries()) {
      const last = i === plan.steps.length - 1
      locked = await transitionPayment(trx, { paymentId: payment.id, to, context, details, now, ...(last && plan.failureReason ? { failureReason: plan.failureReason } : {}) }, locked)
    }
    return plan.outcome
  }
}

/**
 * What an event does to the payment. The processor does not promise delivery order, so an
 * async success or failure may arrive while the payment is still pending; the state table
 * allows the moves that follow from that.
 */
function planFor(type: CardWebhookEvent, session: SessionFields, payment: PaymentRecord): Plan {
  if (type === 'checkout.session.expired') return { steps: ['canceled'], outcome: 'canceled', failureReason: 'session expired at the card processor' }
  if (type === 'checkout.session.async_payment_failed') {
    return { steps: ['failed'], outcome: 'failed', failureReason: 'the card payment failed at the processor (asynchronous payment method)' }
  }
  const mismatch = amountMismatch(session, payment)
  if (mismatch) return { steps: ['failed'], outcome: 'amount_mismatch', failureReason: mismatch }
  if (type === 'checkout.session.async_payment_succeeded') return { steps: completionSteps(payment.status), outcome: 'completed' }
  // checkout.session.completed
  if (session.payment_status === 'paid' || session.payment_status === 'no_payment_required') return { steps: completionSteps(payment.status), outcome: 'completed' }
  if (session.payment_status === 'unpaid') return { steps: ['processing'], outcome: 'processing' }
  return { steps: [], outcome: 'ignored' }
}

/** The webhook event a session's current state would have been reported by; none while open. */
function eventTypeForSession(session: SessionFields): CardWebhookEvent | undefined {
  if (session.status === 'expired') return 'checkout.session.expired'
  if (session.status === 'complete') return 'checkout.session.completed'
  return undefined
}

/** `t=` of a `Provider-Signature` header (verified by then), in unix seconds. */
function signedTimestamp(header: string): number | undefined {
  const item = header.split(',').find((part) => part.trim().startsWith('t='))
  const seconds = item === undefined ? Number.NaN : Number(item.trim().slice(2))
  return Number.isSafeInteger(seconds) ? seconds : undefined
}

function completionSteps(status: PaymentStatus): PaymentStatus[] {
  return status === 'pending' ? ['processing', 'completed'] : ['completed']
}

function amountMismatch(session: SessionFields, payment: PaymentRecord): string | undefined {
  const currency = payment.currency.toLowerCase()
  if (session.amount_total === payment.amountMinor && session.currency?.toLowerCase() === currency) return undefined
  return (
    `amount mismatch: the card processor reported ${session.amount_total ?? 'no amount'} ${session.currency ?? '(no currency)'}, ` +
    `the payment is ${payment.amountMinor} ${currency}`
  )
}
