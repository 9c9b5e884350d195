/**
 * The API's view of a subscription: the spec's fields without provider, region and
 * instance_type ("hidden in API responses"). Those columns are never selected, so no caller,
 * admin included, can receive them (docs/http.md, Subscriptions).
 */
import type { Visibility } from '../auth/scopes.js'
import type { Knex } from 'knex'
import { toDate, toDateOrNull } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import type { SubscriptionDuration } from '../config/chains.js'

export const SUBSCRIPTION_STATUSES = ['pending_payment', 'active', 'expiring', 'terminated'] as const
export type SubscriptionStatus = (typeof SUBSCRIPTION_STATUSES)[number]

export interface SubscriptionView {
  id: string
  user_id: string
  chain_profile_id: string
  node_type: string
  duration: SubscriptionDuration
  status: SubscriptionStatus
  expires_at: string
  grace_period_expires_at: string | null
  payment_id: string | null
  created_at: string
  updated_at: string
}


export interface SubscriptionFilters {
  status?: SubscriptionStatus | undefined
  userId?: string | undefined
}

/** The sort and tie-break columns of subscription lists (newest first). */
export const SUBSCRIPTION_LIST_ORDER = { sortColumn: 'created_at', idColumn: 'id' } as const

export const SUBSCRIPTION_VIEW_COLUMNS = [
  'id',
  'user_id',
  'chain_profile_id',
  'node_type',
  'duration',
  'status',
  'expires_at',
  'grace_period_expires_at',
  'payment_id',
  'created_at',
  'updated_at',
] as const

/** Subscriptions visible to the caller and matching the filters; filters only, as `paginateKeyset` wants it. */
export function subscriptionViewQuery(db: Queryable, visibility: Visibility, filters: SubscriptionFilters = {}): Knex.QueryBuilder {
  const query = db('subscriptions')
  if (visibility.kind === 'owner') query.where('user_id', visibility.userId)
  if (filters.userId !== undefined) query.where('user_id', filters.userId)
  if (filters.status !== undefined) query.where('status', filters.status)
  return query
}

/** One subscription as the caller may see it; undefined when it does not exist or is not theirs. */
export async function findSubscriptionView(db: Queryable, visibility: Visibility, id: string): Promise<SubscriptionView | undefined> {
  const row = (await subscriptionViewQuery(db, visibility)
    .where('id', id)
    .first(...SUBSCRIPTION_VIEW_COLUMNS)) as Record<string, unknown> | undefined
  return row ? subscriptionViewFromRow(row) : undefined
}

const textOrNull = (value: unknown): string | null => (value === null || value === undefined ? null : String(value))

/** A row selected with SUBSCRIPTION_VIEW_COLUMNS. */
export function subscriptionViewFromRow(row: Record<string, unknown>): SubscriptionView {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    chain_profile_id: String(row.chain_profile_id),
    node_type: String(row.node_type),
    duration: row.duration as SubscriptionDuration,
    status: row.status as SubscriptionStatus,
    expires_at: toDate(row.expires_at).toISOString(),
    grace_period_expires_at: toDateOrNull(row.grace_period_expires_at)?.toISOString() ?? null,
    payment_id: textOrNull(row.payment_id),
    created_at: toDate(row.created_at).toISOString(),
    updated_at: toDate(row.updated_at).toISOString(),
  }
}
