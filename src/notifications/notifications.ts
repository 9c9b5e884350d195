/**
 * User notifications (table `notifications`, migration 0005): what the control plane tells a
 * user about their payments and subscriptions (and later incidents and rollouts). For now they
 * are delivered only by being listed: GET /api/v1/notifications and `nodeplane notification
 * list` (docs/subscriptions.md, "Notifications"). Writers pass their own transaction, so a
 * notification commits with the change it reports, or not at all.
 */
import type { Knex } from 'knex'
import { fromJson, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import type { Page } from '../http/pagination.js'
import { paginateKeyset } from '../http/pagination.js'

/** Kinds written today; the column is free text so later kinds (incidents, rollouts) need no migration. */
export const NOTIFICATION_KINDS = [
  'payment_failed',
  'payment_canceled',
  'subscription_expiring',
  'subscription_terminated',
  // docs/node-lifecycle.md, "Paid but never provisioned": the retries ran out
  'subscription_provision_failed',
  // docs/incidents.md, "Notifications"
  'incident_opened',
  'incident_escalated',
  'incident_flapping',
  'incident_resolved',
  // docs/rollouts.md, "Events and notifications": to the operator who created the rollout
  'rollout_started',
  'rollout_completed',
  'rollout_paused',
  'rollout_failed',
  'rollback_initiated',
  'rollback_completed',
  // docs/infrastructure.md, "Drain": to the operator who drained the host
  'host_drain_completed',
  'host_drain_stopped',
] as const
export type NotificationKind = (typeof NOTIFICATION_KINDS)[number]

export type NotificationData = Record<string, string | number | boolean | null>

export interface NewNotification {
  userId: string
  kind: NotificationKind
  title: string
  body: string
  data: NotificationData
}

export interface NotificationView {
  id: string
  user_id: string
  kind: string
  title: string
  body: string
  data: NotificationData
  created_at: string
  read_at: string | null
}

export const NOTIFICATION_COLUMNS = ['id', 'user_id', 'kind', 'title', 'body', 'data', 'created_at', 'read_at'] as const

/** Sort and tie-break of notification lists (newest first), matching the (user_id, created_at, id) index. */
export const NOTIFICATION_LIST_ORDER = { sortColumn: 'created_at', idColumn: 'id' } as const

export function notificationFromRow(row: Record<string, unknown>): NotificationView {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    kind: String(row.kind),
    title: String(row.title),
    body: String(row.body),
    data: fromJson<NotificationData>(row.data),
    created_at: toDate(row.created_at).toISOString(),
    read_at: toDateOrNull(row.read_at)?.toISOString() ?? null,
  }
}

function toRow(n: NewNotification, now: Date) {
  return { id: uuidv7(now.getTime()), user_id: n.userId, kind: n.kind, title: n.title, body: n.body, data: toJson(n.data), created_at: now, read_at: null }
}

export async function createNotification(db: Queryable, notification: NewNotification, now: Date): Promise<NotificationView> {
  const row = toRow(notification, now)
  await db('notifications').insert(row)
  return notificationFromRow(row)
}

/** One statement per call (batches of 500), for the cleanup's set-based transitions. */
export async function createNotifications(db: Queryable, notifications: readonly NewNotification[], now: Date): Promise<number> {
  if (notifications.length === 0) return 0
  const rows = notifications.map((n) => toRow(n, now))
  for (let i = 0; i < rows.length; i += 500) await db('notifications').insert(rows.slice(i, i + 500))
  return rows.length
}

export interface NotificationFilters {
  /** Only those not read yet. */
  unread?: boolean | undefined
}

/** The user's notifications matching the filters; filters only, as `paginateKeyset` wants it. */
export function notificationQuery(db: Queryable, userId: string, filters: NotificationFilters = {}): Knex.QueryBuilder {
  const query = db('notifications').where('user_id', userId)
  if (filters.unread) query.whereNull('read_at')
  return query
}

export interface ListNotificationsOptions extends NotificationFilters {
  limit: number
  cursor?: string | undefined
}

/** A page of the user's own notifications, newest first. */
export function listNotifications(db: Queryable, userId: string, options: ListNotificationsOptions): Promise<Page<NotificationView>> {
  return paginateKeyset(db, notificationQuery(db, userId, options), {
    ...NOTIFICATION_LIST_ORDER,
    direction: 'desc',
    limit: options.limit,
    cursor: options.cursor,
    columns: NOTIFICATION_COLUMNS,
    map: notificationFromRow,
  })
}

/**
 * Marks one of the user's notifications read and returns it; undefined when it does not exist
 * or belongs to someone else. Reading it again keeps the first read_at.
 */
export async function markNotificationRead(db: Queryable, userId: string, id: string, now: Date): Promise<NotificationView | undefined> {
  await db('notifications').where({ id, user_id: userId }).whereNull('read_at').update({ read_at: now })
  const row = (await db('notifications').where({ id, user_id: userId }).first(...NOTIFICATION_COLUMNS)) as Record<string, unknown> | undefined
  return row ? notificationFromRow(row) : undefined
}
