/**
 * Payments through the control plane (spec: "POST /api/v1/payments request"; docs/payments.md):
 * create one for the caller's pending subscriptions (scope `payments:write`), list and read
 * them (`payments:read`; the caller's own, every one for an admin), cancel a pending one, ask
 * for a quote, and the methods the enabled providers take. The payment service is reached over
 * mutual-TLS gRPC; when it is not configured or down these answer 503.
 */
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { ConflictError, NotFoundError, UnavailableError } from '../../errors.js'
import type { Logger } from '../../log.js'
import { findUserById } from '../../auth/users.js'
import type { PaymentClient } from '../../payments/client.js'
import { DURATIONS } from '../../payments/pricing.js'
import { CRYPTO_CURRENCIES, PAYMENT_METHODS, PAYMENT_STATUSES } from '../../payments/states.js'
import {
  findPaymentRequest,
  PAYMENT_REQUEST_COLUMNS,
  paymentRequestFromRow,
  paymentViewFromWire,
  refreshPaymentRequest,
  requestPayment,
} from '../../subscriptions/payment-requests.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { callerVisibility, listingScope } from '../visibility.js'
import { z } from '../zod.js'

export interface PaymentRouteDeps {
  db: Db
  logger?: Logger
  now?: () => Date
  /** The payment service client; absent when it is not configured (the routes answer 503). */
  payments?: PaymentClient
}

const TAGS = ['payments']
const timestamp = z.string().openapi({ format: 'date-time' })
const MAX_URL = 2_000

const lineItem = z
  .object({
    chain_profile_id: z.string().min(1).max(100).openapi({ example: 'devnet' }),
    node_type: z.string().min(1).max(50).openapi({ example: 'full' }),
    duration: z.enum(DURATIONS),
  })
  .strict()

const httpUrl = z
  .string()
  .max(MAX_URL)
  .url('must be an absolute URL')
  .refine((v) => /^https?:\/\//i.test(v), 'must be an http(s) URL')

const createBody = z
  .object({
    items: z.array(lineItem).min(1, 'must not be empty').max(20, 'at most 20 items'),
    subscription_ids: z.array(z.string().uuid('must be subscription ids (UUIDs)')).max(20, 'at most 20 subscription ids').optional().openapi({
      description: 'pending_payment subscriptions of the caller this payment is for; items must be exactly what they are for',
    }),
    method: z.enum(PAYMENT_METHODS),
    crypto_currency: z.enum(CRYPTO_CURRENCIES).optional().openapi({ description: 'Required when method is crypto' }),
    idempotency_key: z
      .string()
      .min(1)
      .max(255)
      .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces')
      .openapi({ description: 'Client-generated; a retry with the same key returns the same payment' }),
    return_url: httpUrl.openapi({ description: 'Where the checkout page sends the payer after paying' }),
    cancel_url: httpUrl.openapi({ description: 'Where the checkout page sends the payer on cancel' }),
    quote_id: z.string().uuid().optional().openapi({ description: 'Pay the prices of this unexpired quote (POST /api/v1/quotes)' }),
  })
  .strict()
  .superRefine((body, ctx) => {
    if (body.method === 'crypto' && !body.crypto_currency) ctx.addIssue({ code: 'custom', path: ['crypto_currency'], message: `required when method is crypto (${CRYPTO_CURRENCIES.join(', ')})` })
    if (body.method !== 'crypto' && body.crypto_currency) ctx.addIssue({ code: 'custom', path: ['crypto_currency'], message: 'only for method crypto' })
  })
  .openapi('CreatePaymentRequest')

const pricedItem = z.object({ chain_profile_id: z.string(), node_type: z.string(), duration: z.string(), unit_price_minor: z.number().int() })

const paymentView = z
  .object({
    id: z.string().uuid(),
    user_id: z.string().uuid(),
    status: z.enum(PAYMENT_STATUSES),
    method: z.enum(PAYMENT_METHODS),
    provider: z.string().openapi({ example: 'card' }),
    amount_minor: z.number().int().openapi({ description: 'Total in minor units of currency (ISO 4217 exponent: cents for USD, yen for JPY, fils for KWD)' }),
    currency: z.string().openapi({ example: 'USD' }),
    items: z.array(pricedItem),
    subscription_ids: z.array(z.string().uuid()),
    checkout_url: z.string().nullable().openapi({ description: 'Hosted checkout page to send the payer to (card)' }),
    crypto: z
      .object({
        currency: z.string(),
        amount: z.string().openapi({ description: 'In whole tokens', example: '25.000000' }),
        amount_base_units: z.string(),
        receiver_address: z.string(),
        memo: z.string().openapi({ description: 'The payment id as a 32-byte hex value; pass it to transferWithMemo' }),
        contract_address: z.string().nullable(),
        chain_id: z.number().int().nullable(),
      })
      .nullable(),
    failure_reason: z.string().nullable(),
    idempotency_key: z.string(),
    return_url: z.string(),
    cancel_url: z.string(),
    expires_at: timestamp.openapi({ description: 'A payment still pending then is canceled (session expiry, 30 minutes)' }),
    created_at: timestamp,
    updated_at: timestamp,
    completed_at: timestamp.nullable(),
  })
  .openapi('Payment')

/** What a cancel answers: the payment as it is now, and whether this call canceled it. */
const canceledPaymentView = paymentView
  .extend({ changed: z.boolean().openapi({ description: 'false for a repeat: the payment was canceled already (docs/cli.md, "Repeats")' }) })
  .openapi('CanceledPayment')

const paymentSummary = z
  .object({
    id: z.string().uuid(),
    user_id: z.string().uuid(),
    status: z.enum(PAYMENT_STATUSES),
    method: z.enum(PAYMENT_METHODS),
    crypto_currency: z.string().nullable(),
    amount_minor: z.number().int(),
    currency: z.string(),
    subscription_ids: z.array(z.string().uuid()),
    failure_reason: z.string().nullable(),
    created_at: timestamp,
    updated_at: timestamp,
    completed_at: timestamp.nullable(),
  })
  .openapi('PaymentSummary')

const quoteBody = z
  .object({
    items: z.array(lineItem).min(1, 'must not be empty').max(20, 'at most 20 items'),
    crypto_currency: z.enum(CRYPTO_CURRENCIES).optional(),
  })
  .strict()
  .openapi('QuoteRequest')

const quoteView = z
  .object({
    id: z.string().uuid(),
    items: z.array(pricedItem),
    amount_minor: z.number().int(),
    currency: z.string(),
    crypto_amounts: z.record(z.string()).openapi({ description: 'Crypto currency -> amount in whole tokens' }),
    expires_at: timestamp.openapi({ description: 'Quotes hold for 15 minutes' }),
  })
  .openapi('Quote')

const listQuery = paginationQuery.extend({
  status: z.enum(PAYMENT_STATUSES).optional(),
  user_id: z.string().uuid('must be a user id (UUID)').optional().openapi({ description: 'Admin only: the payments of this user' }),
})

const idParams = z.object({ id: z.string() })
const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no payment with this id among the payments you can see')
const UNAVAILABLE_503 = errorResponse('The payment service is not configured or not reachable')

export function paymentRoutes(deps: PaymentRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  const client = (): PaymentClient => {
    if (!deps.payments) throw new UnavailableError('the payment service is not configured', 'an operator must set PAYMENT_SERVICE_URL and the PAYMENT_* TLS files (or run `nodeplane certs dev`)')
    return deps.payments
  }
  const visiblePayment = async (principal: Parameters<typeof callerVisibility>[0], id: string) => {
    if (!isUuid(id)) throw NOT_FOUND()
    const mirror = await findPaymentRequest(db, id.toLowerCase())
    const visibility = callerVisibility(principal)
    if (!mirror || (visibility.kind === 'owner' && mirror.user_id !== visibility.userId)) throw NOT_FOUND()
    return mirror
  }

  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/payments',
      summary: 'Pay for pending_payment subscriptions: initiates the payment at the payment service',
      description:
        'Each subscription id must exist, be the caller\'s and be pending_payment (another user\'s answers 404, one not pending 409); items must be exactly what they are for. ' +
        'The answer carries what the payer needs: checkout_url for card, the receiver address, memo, contract and amount for crypto. ' +
        'A retry with the same idempotency_key returns the same payment (200); the same key with a different request is 409.',
      tags: TAGS,
      auth: { scope: 'payments:write' },
      request: { body: createBody },
      responses: {
        200: paymentView,
        201: paymentView,
        400: errorResponse('A field is missing or invalid, unknown item, unsupported currency'),
        404: errorResponse('A subscription id that is not one of yours'),
        409: errorResponse('A subscription not pending_payment or linked to another open payment; idempotency_key reused for a different request; no provider for the method'),
        503: UNAVAILABLE_503,
      },
    }).handle(async ({ body, principal, requestId, ctx, log }) => {
      const user = principal.user ?? (await findUserById(db, principal.userId))
      if (!user) throw NOT_FOUND()
      const { payment, created } = await requestPayment(
        { db, client: client(), logger: log, now },
        { id: user.id, email: user.email, wallet_address: user.wallet_address },
        body,
        { requestId, ip: ctx.ip },
      )
      if (created) log.info({ paymentId: payment.id, method: payment.method, provider: payment.provider }, 'payment initiated')
      return created ? { status: 201, body: payment } : { status: 200, body: payment }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/payments',
      summary: "List payments initiated through the API, newest first: the caller's own, or every one for an admin",
      description: 'Statuses follow the payment service\'s events (payment.completed, payment.failed, payment.canceled); GET /api/v1/payments/{id} reads the live state.',
      tags: TAGS,
      auth: { scope: 'payments:read' },
      request: { query: listQuery },
      responses: { 200: pageSchema(paymentSummary).openapi('PaymentPage'), 403: errorResponse('Lacks payments:read, or a non-admin filters by another user') },
    }).handle(async ({ query, principal }) => {
      const { visibility, userId } = listingScope(principal, query.user_id, 'payments')
      const q = db('payment_requests')
      if (visibility.kind === 'owner') q.where({ user_id: visibility.userId })
      if (userId) q.where({ user_id: userId })
      if (query.status) q.where({ status: query.status })
      const page = await paginateKeyset(db, q, {
        sortColumn: 'created_at',
        idColumn: 'id',
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: PAYMENT_REQUEST_COLUMNS,
        map: paymentRequestFromRow,
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/payments/{id}',
      summary: 'One payment, live from the payment service',
      tags: TAGS,
      auth: { scope: 'payments:read' },
      request: { params: idParams },
      responses: { 200: paymentView, 404: errorResponse('No such payment, or not yours (the same answer for both)'), 503: UNAVAILABLE_503 },
    }).handle(async ({ params, principal }) => {
      const mirror = await visiblePayment(principal, params.id)
      const payment = await client().getPayment(mirror.id, mirror.user_id)
      await refreshPaymentRequest(db, payment, now())
      return { status: 200, body: paymentViewFromWire(payment) }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/payments/{id}/cancel',
      summary: 'Cancel a pending payment (its subscriptions can then be paid again)',
      description: 'pending -> canceled, `changed: true`. A payment canceled already (by its owner, or its session expired) is a repeat: 200 with the payment as it is and `changed: false`. Completed or failed: 409.',
      tags: TAGS,
      auth: { scope: 'payments:write' },
      request: { params: idParams },
      responses: { 200: canceledPaymentView, 404: errorResponse('No such payment, or not yours'), 409: errorResponse('The payment is completed or failed'), 503: UNAVAILABLE_503 },
    }).handle(async ({ params, principal, requestId, ctx }) => {
      const mirror = await visiblePayment(principal, params.id)
      // The payment service refuses to cancel what is not pending; one canceled already is a
      // repeat here (docs/cli.md, "Repeats"), read back only when refused.
      const { payment, changed } = await client()
        .cancelPayment(mirror.id, mirror.user_id, 'canceled by the customer', { request_id: requestId, ip: ctx.ip, actor: `user:${principal.userId}` })
        .then(
          (canceled) => ({ payment: canceled, changed: true }),
          async (err: unknown) => {
            if (!(err instanceof ConflictError)) throw err
            const live = await client().getPayment(mirror.id, mirror.user_id)
            if (live.status !== 'canceled') throw err
            return { payment: live, changed: false }
          },
        )
      await refreshPaymentRequest(db, payment, now())
      return { status: 200, body: { ...paymentViewFromWire(payment), changed } }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/quotes',
      summary: 'Price items (fiat and every supported crypto currency); a quote holds for 15 minutes',
      tags: TAGS,
      auth: { scope: 'payments:read' },
      request: { body: quoteBody },
      responses: { 200: quoteView, 400: errorResponse('Unknown item or unsupported currency'), 503: UNAVAILABLE_503 },
    }).handle(async ({ body, principal }) => {
      const quote = await client().getQuote(body.items, body.crypto_currency ?? null, principal.userId)
      return { status: 200, body: quote }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/payment-methods',
      summary: 'The payment methods of the enabled providers',
      tags: TAGS,
      auth: 'authenticated',
      responses: { 200: z.object({ methods: z.array(z.enum(PAYMENT_METHODS)) }).openapi('PaymentMethods'), 503: UNAVAILABLE_503 },
    }).handle(async () => {
      const methods = (await client().methods()).filter((m): m is (typeof PAYMENT_METHODS)[number] => (PAYMENT_METHODS as readonly string[]).includes(m))
      return { status: 200, body: { methods } }
    }),
  ]
}
