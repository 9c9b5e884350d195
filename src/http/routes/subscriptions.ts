/**
 * `/api/v1/subscriptions` (issue 6, "Subscriptions"; docs/http.md, Subscriptions): create one
 * (scope `subscriptions:write`, the spec's rules 1-4), list and read them (scope
 * `subscriptions:read`): a user their own, a caller holding `admin` every one. Another user's
 * subscription answers 404 with exactly the body of one that does not exist. provider, region
 * and instance_type are in no answer, for admins neither. Operators (scope `admin`) re-provision
 * an active subscription whose node failed (src/subscriptions/provision-retry.ts).
 */
import { isUuid } from '../../db/ids.js'
import type { ChainSource } from '../../config/chain-source.js'
import { DURATIONS } from '../../config/chains.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { reprovisionSubscription } from '../../subscriptions/provision-retry.js'
import { createSubscription } from '../../subscriptions/subscriptions.js'
import {
  findSubscriptionView,
  SUBSCRIPTION_LIST_ORDER,
  SUBSCRIPTION_STATUSES,
  SUBSCRIPTION_VIEW_COLUMNS,
  subscriptionViewFromRow,
  subscriptionViewQuery,
} from '../../subscriptions/views.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { currentCatalogue } from './chains.js'
import { z } from '../zod.js'
import { callerVisibility, listingScope } from '../visibility.js'

export interface SubscriptionRouteDeps {
  db: Db
  now?: () => Date
  /** The chain catalogue, asked per request; the package's own `chains/` when not given. */
  chains?: ChainSource
}

const TAGS = ['subscriptions']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const subscriptionView = z
  .object({
    id: z.string().uuid(),
    user_id: z.string().uuid().openapi({ description: 'The owner' }),
    chain_profile_id: z.string().openapi({ example: 'devnet' }),
    node_type: z.string().openapi({ example: 'full' }),
    duration: z.enum(DURATIONS),
    status: z.enum(SUBSCRIPTION_STATUSES),
    expires_at: timestamp.openapi({ description: 'A placeholder (created_at + duration) until activation sets it from the duration' }),
    grace_period_expires_at: timestamp.nullable().openapi({ description: 'Renewal deadline once expiring; null before' }),
    payment_id: z.string().nullable().openapi({ description: 'null until a payment is linked' }),
    created_at: timestamp,
    updated_at: timestamp,
  })
  .openapi('Subscription')

const createBody = z
  .object({
    chain_profile_id: z.string().min(1).max(100).openapi({ description: 'A chain profile of GET /api/v1/chains', example: 'devnet' }),
    node_type: z.string().min(1).max(50).openapi({ description: "One of the chain profile's node types", example: 'full' }),
    duration: z.enum(DURATIONS),
  })
  .strict()
  .openapi('CreateSubscriptionRequest')

const listQuery = paginationQuery.extend({
  status: z.enum(SUBSCRIPTION_STATUSES).optional().openapi({ description: 'Only subscriptions in this status' }),
  user_id: z.string().uuid('must be a user id (UUID)').optional().openapi({ description: 'Admin only: the subscriptions of this user; a user may give only their own id' }),
})

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one (checked in the handler).
const idParams = z.object({ id: z.string() })

const reprovisionView = z
  .object({
    subscription_id: z.string().uuid(),
    node_id: z.string().uuid().openapi({ description: 'The new node, in state provisioning' }),
    workflow_run_id: z.string().uuid().openapi({ description: 'Its provision run (`nodeplane workflow show --id`)' }),
    previous_node_id: z.string().uuid().nullable().openapi({ description: 'The node it replaces (the newest one), null when there was none' }),
  })
  .openapi('Reprovision')

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no subscription with this id among the subscriptions you can see')


export function subscriptionRoutes(deps: SubscriptionRouteDeps): ApiRoute[] {
  const { db } = deps
  const catalogue = currentCatalogue(deps.chains)
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/subscriptions',
      summary: 'Create a pending_payment subscription for the caller, or return the equal one still pending',
      description:
        'Rule 1: an equal pending_payment subscription of the caller (same chain_profile_id, node_type and duration) is returned with 200; otherwise a new one is created (201). Unknown chain profile, node type or duration: 400 naming the allowed values.',
      tags: TAGS,
      auth: { scope: 'subscriptions:write' },
      request: { body: createBody },
      responses: {
        200: subscriptionView,
        201: subscriptionView,
        400: errorResponse('Unknown chain profile, node type or duration, or another field in the body'),
      },
    }).handle(async ({ body, principal, log }) => {
      const { subscription, created } = await createSubscription(
        db,
        { userId: principal.userId, chainProfileId: body.chain_profile_id, nodeType: body.node_type, duration: body.duration },
        { catalogue: await catalogue(), now: deps.now?.() ?? new Date() },
      )
      if (created) log.info({ subscriptionId: subscription.id }, 'subscription created')
      return created ? { status: 201, body: subscription } : { status: 200, body: subscription }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/subscriptions',
      summary: "List subscriptions, newest first: the caller's own, or every one for an admin",
      tags: TAGS,
      auth: { scope: 'subscriptions:read' },
      request: { query: listQuery },
      responses: {
        200: pageSchema(subscriptionView).openapi('SubscriptionPage'),
        403: errorResponse('The credential lacks subscriptions:read, or a non-admin filters by another user'),
      },
    }).handle(async ({ query, principal }) => {
      const { visibility, userId } = listingScope(principal, query.user_id, 'subscriptions')
      const page = await paginateKeyset(db, subscriptionViewQuery(db, visibility, { status: query.status, userId }), {
        ...SUBSCRIPTION_LIST_ORDER,
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: SUBSCRIPTION_VIEW_COLUMNS,
        map: subscriptionViewFromRow,
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/subscriptions/{id}',
      summary: 'One subscription of the caller (any one for an admin)',
      tags: TAGS,
      auth: { scope: 'subscriptions:read' },
      request: { params: idParams },
      responses: { 200: subscriptionView, 404: errorResponse('No such subscription, or not yours (the same answer for both)') },
    }).handle(async ({ params, principal }) => {
      if (!isUuid(params.id)) throw NOT_FOUND()
      const subscription = await findSubscriptionView(db, callerVisibility(principal), params.id.toLowerCase())
      if (!subscription) throw NOT_FOUND()
      return { status: 200, body: subscription }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/subscriptions/{id}/reprovision',
      summary: 'Operators: provision a new node for an active subscription that has none (its node failed)',
      description:
        'Starts a new node in provisioning and its provision workflow, and resets the automatic retry budget (docs/node-lifecycle.md, "Paid but never provisioned"). ' +
        'An unknown or malformed id answers 404; a subscription that is not active, or already has a live node (provisioning or running), 409.',
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { params: idParams },
      responses: {
        202: reprovisionView,
        404: errorResponse('No such subscription'),
        409: errorResponse('The subscription is not active, or already has a live node'),
      },
    }).handle(async ({ params, principal, log }) => {
      const result = await reprovisionSubscription(db, { subscriptionId: params.id, by: `user:${principal.userId}`, now: deps.now?.() ?? new Date() })
      log.warn({ subscriptionId: result.subscription_id, nodeId: result.node_id, previousNodeId: result.previous_node_id }, 'subscription re-provisioned by an operator')
      return { status: 202, body: result }
    }),
  ]
}
