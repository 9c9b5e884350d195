/**
 * Creating a subscription (spec: "POST /api/v1/subscriptions rules"):
 * 1. an equal `pending_payment` subscription of the same user (chain profile, node type,
 *    duration) is returned instead of a new one;
 * 2. the chain profile and node type must exist in the catalogue;
 * 3. provider, region and instance type are resolved from the profile and the duration;
 * 4. a new one starts `pending_payment`, with a placeholder expires_at and no payment.
 *
 * Rule 1 holds under concurrency through the partial unique index `subscriptions_one_pending_uq`
 * (migrations/control-plane/0001): the loser of two identical inserts gets a unique violation
 * and returns the winner's row.
 */
import { getProfile, resolvePlacement, type ChainCatalogue, type SubscriptionDuration } from '../config/chains.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { SUBSCRIPTION_VIEW_COLUMNS, subscriptionViewFromRow, type SubscriptionView } from './views.js'

export interface CreateSubscriptionRequest {
  userId: string
  chainProfileId: string
  nodeType: string
  duration: SubscriptionDuration
}

export interface CreateSubscriptionResult {
  subscription: SubscriptionView
  /** false when an equal pending_payment subscription was returned (rule 1). */
  created: boolean
}

const DAY_MS = 86_400_000

/**
 * When a subscription of `duration` starting at `from` ends: weeks are 7 days, months are
 * calendar months in UTC (31 Jan + 1m is clamped to the last day of February, not 3 March).
 */
export function durationEnd(from: Date, duration: SubscriptionDuration): Date {
  if (duration === '1w' || duration === '2w') return new Date(from.getTime() + (duration === '1w' ? 7 : 14) * DAY_MS)
  const months = { '1m': 1, '3m': 3, '6m': 6 }[duration]
  const end = new Date(from.getTime())
  const day = end.getUTCDate()
  end.setUTCDate(1)
  end.setUTCMonth(end.getUTCMonth() + months)
  const lastDay = new Date(Date.UTC(end.getUTCFullYear(), end.getUTCMonth() + 1, 0)).getUTCDate()
  end.setUTCDate(Math.min(day, lastDay))
  return end
}

async function findEqualPending(db: Queryable, request: CreateSubscriptionRequest): Promise<SubscriptionView | undefined> {
  const row = (await db('subscriptions')
    .where({ user_id: request.userId, chain_profile_id: request.chainProfileId, node_type: request.nodeType, duration: request.duration, status: 'pending_payment' })
    .first(...SUBSCRIPTION_VIEW_COLUMNS)) as Record<string, unknown> | undefined
  return row ? subscriptionViewFromRow(row) : undefined
}

export async function createSubscription(
  db: Queryable,
  request: CreateSubscriptionRequest,
  deps: { catalogue: ChainCatalogue; now?: Date },
): Promise<CreateSubscriptionResult> {
  const existing = await findEqualPending(db, request)
  if (existing) return { subscription: existing, created: false }

  const profile = getProfile(deps.catalogue, request.chainProfileId)
  const placement = resolvePlacement(profile, request.nodeType, request.duration)
  const now = deps.now ?? new Date()
  const id = uuidv7(now.getTime())
  try {
    await db('subscriptions').insert({
      id,
      user_id: request.userId,
      chain_profile_id: profile.id,
      node_type: request.nodeType,
      duration: request.duration,
      ...placement,
      status: 'pending_payment',
      // Placeholder (spec): the end of the term if it started now; activation sets the real one.
      expires_at: durationEnd(now, request.duration),
      grace_period_expires_at: null,
      payment_id: null,
      created_at: now,
      updated_at: now,
    })
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
    const winner = await findEqualPending(db, request)
    // The winner may have been paid or cleaned up in between; then the violation stands as is.
    if (!winner) throw err
    return { subscription: winner, created: false }
  }
  const created = (await db('subscriptions').where({ id }).first(...SUBSCRIPTION_VIEW_COLUMNS)) as Record<string, unknown>
  return { subscription: subscriptionViewFromRow(created), created: true }
}
