/**
 * The subscription status table (spec: "States and transitions / Subscription status") in code,
 * and the one way to move a subscription through it (ARCHITECTURE.md, "One state machine per
 * entity"):
 *
 * | from            | moved by                  | next       |
 * |-----------------|---------------------------|------------|
 * | (none)          | POST /api/v1/subscriptions | pending_payment (subscriptions.ts) |
 * | pending_payment | event payment.completed   | active     |
 * | pending_payment | cleanup, older than TTL   | deleted    |
 * | active          | cleanup, expires_at past  | expiring   |
 * | active          | operator ends it with its node (extension, `node terminate --end-subscription`) | terminated |
 * | expiring        | cleanup, grace past; or an operator, as above | terminated |
 * | terminated      | —                         | (terminal) |
 *
 * Every status write goes through `transitionSubscription` (one row, optimistic lock on
 * `version`) or `transitionSubscriptionsWhere` (a set, guarded by the status it moves from, so a
 * row another writer moved meanwhile is simply not matched). Both bump `version`.
 */
import type { Knex } from 'knex'
import type { Queryable } from '../db/knex.js'
import { ConflictError } from '../errors.js'
import { SUBSCRIPTION_STATUSES, type SubscriptionStatus } from './views.js'

export const SUBSCRIPTION_TRANSITIONS: Readonly<Record<SubscriptionStatus, readonly SubscriptionStatus[]>> = {
  pending_payment: ['active'],
  // active -> terminated is an extension of the spec's table: an operator ends a subscription
  // with its node (operator-termination.ts), rather than leave it paid with no node behind it.
  active: ['expiring', 'terminated'],
  expiring: ['terminated'],
  terminated: [],
}

/** Only an unpaid subscription is ever deleted (by the cleanup, after the pending TTL). */
export const DELETABLE_SUBSCRIPTION_STATUSES: readonly SubscriptionStatus[] = ['pending_payment']

export function isSubscriptionStatus(value: unknown): value is SubscriptionStatus {
  return typeof value === 'string' && (SUBSCRIPTION_STATUSES as readonly string[]).includes(value)
}

export function canTransitionSubscription(from: SubscriptionStatus, to: SubscriptionStatus): boolean {
  return SUBSCRIPTION_TRANSITIONS[from].includes(to)
}

export function canDeleteSubscription(status: SubscriptionStatus): boolean {
  return DELETABLE_SUBSCRIPTION_STATUSES.includes(status)
}

/** A move the table does not allow. */
export class InvalidSubscriptionTransitionError extends ConflictError {
  constructor(
    readonly from: SubscriptionStatus,
    readonly to: SubscriptionStatus,
    subscriptionId?: string,
  ) {
    const allowed = SUBSCRIPTION_TRANSITIONS[from]
    super(
      `${subscriptionId ? `subscription ${subscriptionId}` : 'a subscription'} cannot move from ${from} to ${to}`,
      `allowed from ${from}: ${allowed.length > 0 ? allowed.join(', ') : 'none (terminal)'}`,
    )
  }
}

/** The row changed (status or version) since the caller read it. */
export class StaleSubscriptionError extends ConflictError {
  constructor(readonly subscriptionId: string) {
    super(`subscription ${subscriptionId} was changed concurrently`, 'read it again and retry')
  }
}

/** Columns a transition may set besides status, version and updated_at. */
export interface SubscriptionTransitionFields {
  activated_at?: Date | null
  expires_at?: Date
  grace_period_expires_at?: Date | null
  payment_id?: string | null
}

export interface SubscriptionTransition {
  id: string
  from: SubscriptionStatus
  to: SubscriptionStatus
  /** The version the caller read. */
  expectedVersion: number
  set?: SubscriptionTransitionFields
  now: Date
}

export function assertSubscriptionTransition(from: SubscriptionStatus, to: SubscriptionStatus, id?: string): void {
  if (!canTransitionSubscription(from, to)) throw new InvalidSubscriptionTransitionError(from, to, id)
}

/** Moves one subscription; throws InvalidSubscriptionTransitionError or StaleSubscriptionError. */
export async function transitionSubscription(trx: Queryable, transition: SubscriptionTransition): Promise<{ version: number }> {
  const { id, from, to, expectedVersion, now } = transition
  assertSubscriptionTransition(from, to, id)
  const updated = await trx('subscriptions')
    .where({ id, status: from, version: expectedVersion })
    .update({ ...transition.set, status: to, version: expectedVersion + 1, updated_at: now })
  if (updated !== 1) throw new StaleSubscriptionError(id)
  return { version: expectedVersion + 1 }
}

export interface BulkSubscriptionTransition {
  from: SubscriptionStatus
  to: SubscriptionStatus
  /** Narrows the rows in `from` (e.g. `expires_at <= now`); the status guard is added here. */
  where: (query: Knex.QueryBuilder) => void
  set?: SubscriptionTransitionFields
  now: Date
  /** At most this many rows per call (the oldest by id first). */
  limit: number
}

export interface MovedSubscription {
  id: string
  user_id: string
  chain_profile_id: string
  node_type: string
}

/**
 * Moves every matching subscription in one statement and returns the moved rows. The status
 * guard is repeated on the outer UPDATE, so a row moved by someone else between the sub-select
 * and the update (Postgres re-checks the WHERE on a row changed concurrently) is left alone.
 */
export async function transitionSubscriptionsWhere(trx: Queryable, transition: BulkSubscriptionTransition): Promise<MovedSubscription[]> {
  const { from, to, now } = transition
  assertSubscriptionTransition(from, to)
  const candidates = trx('subscriptions').select('id').where('status', from).orderBy('id').limit(transition.limit)
  transition.where(candidates)
  const rows = (await trx('subscriptions')
    .whereIn('id', candidates)
    .andWhere('status', from)
    .update({ ...transition.set, status: to, version: trx.raw('version + 1'), updated_at: now })
    .returning(['id', 'user_id', 'chain_profile_id', 'node_type'])) as Array<Record<string, unknown>>
  return rows.map((r) => ({ id: String(r.id), user_id: String(r.user_id), chain_profile_id: String(r.chain_profile_id), node_type: String(r.node_type) }))
}
