/**
 * `/api/v1/notifications` (docs/subscriptions.md, "Notifications"): the caller's own
 * notifications, newest first, and marking one read. Any authenticated caller, admins included,
 * sees only their own; another user's notification answers 404 exactly like a missing one.
 */
import { isUuid } from '../../db/ids.js'
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { listNotifications, markNotificationRead } from '../../notifications/notifications.js'
import { paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface NotificationRouteDeps {
  db: Db
  now?: () => Date
}

const TAGS = ['notifications']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const notificationView = z
  .object({
    id: z.string().uuid(),
    user_id: z.string().uuid(),
    kind: z.string().openapi({ description: 'payment_failed, payment_canceled, subscription_expiring, subscription_terminated (more kinds may be added)', example: 'payment_failed' }),
    title: z.string(),
    body: z.string(),
    data: z.record(z.union([z.string(), z.number(), z.boolean(), z.null()])).openapi({ description: 'Ids the notification is about, e.g. payment_id or subscription_id' }),
    created_at: timestamp,
    read_at: timestamp.nullable().openapi({ description: 'When it was marked read; null while unread' }),
  })
  .openapi('Notification')

const listQuery = paginationQuery.extend({
  unread: z
    .enum(['true', 'false'], { message: 'must be true or false' })
    .optional()
    .transform((v) => v === 'true')
    .openapi({ description: 'true: only notifications not read yet' }),
})

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one.
const idParams = z.object({ id: z.string() })

const NOT_FOUND = (): NotFoundError => new NotFoundError('not found', 'no notification with this id among your notifications')

export function notificationRoutes(deps: NotificationRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/notifications',
      summary: "The caller's own notifications, newest first",
      description: 'Payment failures and cancellations, subscription expiry and termination. Only ever the caller\'s own, for admins too.',
      tags: TAGS,
      auth: 'authenticated',
      request: { query: listQuery },
      responses: { 200: pageSchema(notificationView).openapi('NotificationPage') },
    }).handle(async ({ query, principal }) => {
      const page = await listNotifications(db, principal.userId, { unread: query.unread, limit: query.limit, cursor: query.cursor })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/notifications/{id}/read',
      summary: 'Mark one of your notifications read (again: no change)',
      tags: TAGS,
      auth: 'authenticated',
      request: { params: idParams },
      responses: { 200: notificationView, 404: errorResponse('No such notification, or not yours (the same answer for both)') },
    }).handle(async ({ params, principal }) => {
      if (!isUuid(params.id)) throw NOT_FOUND()
      const notification = await markNotificationRead(db, principal.userId, params.id.toLowerCase(), now())
      if (!notification) throw NOT_FOUND()
      return { status: 200, body: notification }
    }),
  ]
}
