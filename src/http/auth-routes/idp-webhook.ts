/**
 * `POST /webhooks/idp`: identity-provider events (spec: Authentication). No JWT, no rate limit;
 * the Standard Webhooks signature is the authentication (src/auth/webhooks.ts).
 *
 * The body is read raw and its signature checked before it is parsed, so the route does its
 * own body reading instead of the shared JSON parser: a bad or missing signature is 401 before
 * any of the body is interpreted, and nothing is written. Only then is the JSON parsed (400 when
 * malformed) and validated against the route's declared schema.
 */
import {
  idpEventSchema,
  processIdpWebhook,
  verifyWebhookSignature,
  type VerifiedDelivery,
  type WebhookOutcome,
} from '../../auth/webhooks.js'
import type { Db } from '../../db/knex.js'
import { ValidationError } from '../../errors.js'
import { readRawBody } from '../body.js'
import type { ApiContext, ApiMiddleware } from '../context.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export const IDP_WEBHOOK_PATH = '/webhooks/idp'

export interface IdpWebhookRouteDeps {
  db: Db
  /** The decoded AUTH_IDP_WEBHOOK_SIGNING_SECRET. */
  key: Buffer
  bodyLimitBytes: number
  now: () => Date
}

const outcomes = [
  'duplicate',
  'ignored',
  'user_created',
  'user_exists',
  'user_updated',
  'user_unchanged',
  'user_unknown',
  'user_deleted_logged',
] as const satisfies readonly WebhookOutcome[]

const webhookAnswer = z
  .object({
    status: z.literal('ok'),
    outcome: z.enum(outcomes).openapi({ description: '`duplicate`: this webhook-id was processed before; nothing was done again' }),
  })
  .openapi('IdpWebhookAnswer')

export function idpWebhookRoute(deps: IdpWebhookRouteDeps): ApiRoute {
  const verified = new WeakMap<ApiContext, VerifiedDelivery>()
  const route = defineRoute({
    method: 'post',
    path: IDP_WEBHOOK_PATH,
    summary: 'Identity-provider events: user.created, user.updated, user.deleted',
    description:
      'Signed with the Standard Webhooks scheme: headers webhook-id, webhook-timestamp, webhook-signature (or svix-*), ' +
      'HMAC-SHA256 over `${id}.${timestamp}.${body}` with AUTH_IDP_WEBHOOK_SIGNING_SECRET; timestamps more than 5 minutes ' +
      'off are refused. A webhook-id seen before is answered 200 `duplicate` without processing. Other event types are ignored (200).',
    tags: ['auth'],
    auth: 'none',
    request: { body: idpEventSchema.openapi('IdpEvent') },
    responses: { 200: webhookAnswer, 401: errorResponse('Missing or invalid signature, or a stale timestamp; nothing was written') },
  }).handle(async ({ body, ctx, log }) => {
    const delivery = verified.get(ctx) as VerifiedDelivery
    const outcome = await processIdpWebhook(deps.db, { id: delivery.id, event: body }, log.child({ webhookId: delivery.id.slice(0, 100) }), deps.now())
    if (outcome === 'duplicate') log.info({ webhookId: delivery.id.slice(0, 100) }, 'webhook id seen before: not processed again')
    return { status: 200, body: { status: 'ok', outcome } }
  })

  const handle: ApiMiddleware = async (ctx, next) => {
    const rawBody = await readRawBody(ctx, deps.bodyLimitBytes)
    verified.set(
      ctx,
      verifyWebhookSignature({ key: deps.key, rawBody, now: deps.now(), header: (name) => ctx.get(name) || undefined }),
    )
    ctx.request.body = parseJson(rawBody)
    await route.handle(ctx, next)
  }
  // The shared JSON parser must not consume the body first: this route reads it itself.
  return { ...route, hasBody: false, handle }
}


function parseJson(rawBody: Buffer): unknown {
  try {
    return JSON.parse(rawBody.toString('utf8'))
  } catch {
    throw new ValidationError('malformed JSON', 'the webhook body is not valid JSON')
  }
}
