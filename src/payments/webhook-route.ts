/**
 * `POST /webhooks/card-provider` on the payment service's HTTP port (payment service spec,
 * "HTTP on the payment service"). Authenticated only by the processor's signature in
 * `Provider-Signature`, which the provider verifies over the raw bytes before anything is
 * parsed; so this route reads the body itself (the shared JSON parser never sees it) and hands
 * the bytes over untouched. 200 `{status, outcome}` when handled or deliberately ignored (the
 * processor stops retrying), 400 / 401 `{error, details}` when refused with nothing written.
 */
import { UnauthorizedError, ValidationError } from '../errors.js'
import { readRawBody } from '../http/body.js'
import { defineRoute, errorResponse, JSON_CONTENT_TYPE, type ApiRoute } from '../http/route.js'
import { z } from '../http/zod.js'
import type { PaymentProvider, WebhookResult } from './providers/provider.js'

export const CARD_WEBHOOK_PATH = '/webhooks/card-provider'
export const SIGNATURE_HEADER = 'Provider-Signature'

export interface CardWebhookRouteDeps {
  /** The card provider (anything with handleWebhook). */
  provider: PaymentProvider
  /** HTTP_BODY_LIMIT_BYTES. */
  bodyLimitBytes: number
}

const webhookAnswer = z
  .object({
    status: z.literal('ok'),
    outcome: z.string().openapi({
      description:
        '`completed`, `processing`, `failed`, `canceled`: the payment moved; `amount_mismatch`: the amount or currency differed and the payment ' +
        'was failed; `duplicate`: this event id was processed before, nothing was done again; `ignored_state`: the payment is already past ' +
        'what the event asks for (recorded as `webhook.ignored`); `ignored_session`: the event is for another session of the payment; ' +
        '`unknown_payment`: no card payment of ours; `ignored`: an event type that is not handled',
      example: 'completed',
    }),
  })
  .openapi('CardWebhookAnswer')

/** Documentation only: the body is verified and parsed by the provider, not by the route. */
const eventEnvelope = z
  .object({
    id: z.string().openapi({ example: 'evt_1PqR2sT3uV4wX5yZ' }),
    object: z.literal('event'),
    type: z.string().openapi({ example: 'checkout.session.completed' }),
    data: z.object({ object: z.record(z.unknown()).openapi({ description: 'The checkout session' }) }),
  })
  .passthrough()
  .openapi('CardWebhookEvent')

/** The 400 / 401 refusals, as `{ error, details }`. */
function refusal(result: WebhookResult): Error {
  switch (result.outcome) {
    case 'missing_signature':
      return new UnauthorizedError('missing signature', `the ${SIGNATURE_HEADER} header is required`)
    case 'invalid_signature':
      return new UnauthorizedError('invalid signature', `the ${SIGNATURE_HEADER} header does not match the body and the webhook secret, or its timestamp is more than 5 minutes off`)
    case 'malformed_payload':
      return new ValidationError('malformed JSON', 'the webhook body is not valid JSON')
    case 'invalid_event':
      return new ValidationError('invalid event', 'the webhook body is not an event carrying a checkout session')
    default:
      return result.status === 401 ? new UnauthorizedError(result.outcome) : new ValidationError(result.outcome)
  }
}

export function cardWebhookRoute(deps: CardWebhookRouteDeps): ApiRoute {
  const { provider } = deps
  if (!provider.handleWebhook) throw new Error(`payment provider ${provider.name} does not take webhooks`)
  const handleWebhook = provider.handleWebhook.bind(provider)
  const route = defineRoute({
    method: 'post',
    path: CARD_WEBHOOK_PATH,
    summary: 'Card processor events: checkout.session.completed, async_payment_succeeded, async_payment_failed, expired',
    description:
      `Signed by the card processor: header ${SIGNATURE_HEADER}: \`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">\` with ` +
      'CARD_PROVIDER_WEBHOOK_SECRET; a timestamp more than 5 minutes off is refused. The signature is checked before the body is parsed. ' +
      'An event id seen before is answered 200 `duplicate` without processing; other event types are answered 200 `ignored`.',
    tags: ['payments'],
    auth: 'none',
    responses: {
      200: webhookAnswer,
      400: errorResponse('The body is signed but is not JSON, or not an event carrying a checkout session; nothing was written'),
      401: errorResponse(`Missing or invalid ${SIGNATURE_HEADER}, or a stale timestamp; nothing was written`),
      413: errorResponse('Request body over the size limit'),
      415: errorResponse('A compressed body (send it uncompressed)'),
    },
  }).handle(async ({ ctx, requestId }) => {
    const payload = await readRawBody(ctx, deps.bodyLimitBytes)
    const result = await handleWebhook({ payload, signature: ctx.get(SIGNATURE_HEADER) || undefined, requestId, ip: ctx.ip || null })
    if (result.status !== 200) throw refusal(result)
    return { status: 200, body: { status: 'ok', outcome: result.outcome } }
  })
  // The body is documented but not declared: a declared body would be parsed before the signature is checked.
  const openapi = { ...route.openapi, request: { body: { required: true, content: { [JSON_CONTENT_TYPE]: { schema: eventEnvelope } } } } }
  return { ...route, openapi }
}

