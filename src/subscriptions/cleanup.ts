/**
 * The subscription cleanup scheduler (spec: "Subscription status"; run by the health-evaluator
 * daemon every SUBSCRIPTION_CLEANUP_INTERVAL under the database lease `subscription-cleanup`):
 *
 * 1. pending_payment older than PENDING_SUBSCRIPTION_TTL (by created_at) -> deleted, with its
 *    provisioning inputs (ON DELETE CASCADE). Never one linked to a payment whose mirror row is
 *    still `pending` or `processing`: that payment can still complete, and activating the very
 *    subscription the user paid for (keeping its id and the inputs they set) beats the
 *    line-item fallback. The payment service ends every open payment (its session expires after
 *    30 minutes), and the resulting payment.failed / payment.canceled unlinks the subscription,
 *    so the next run deletes it.
 * 2. active with expires_at <= now -> expiring, grace_period_expires_at = now + grace (nodes
 *    keep running); a `subscription_expiring` notification.
 * 3. expiring with grace_period_expires_at <= now -> terminated; its secret provisioning inputs
 *    are deleted; every node not yet terminated gets its terminate workflow (idempotent:
 *    workflow key = node id; the workflow deletes the host, the node's keys and its backups); a
 *    `subscription_terminated` notification.
 *
 * Each step is set-based: a few statements per batch of up to `batchSize` subscriptions, each
 * batch one transaction (status change, workflow starts and notifications commit together).
 */
import { isUuid } from '../db/ids.js'
import type { Db, Tx } from '../db/knex.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { createNotifications } from '../notifications/notifications.js'
import { requestTermination } from '../provisioning/triggers.js'
import { deleteSealedInputs } from './inputs.js'
import { transitionSubscriptionsWhere, type MovedSubscription } from './lifecycle.js'

export const SUBSCRIPTION_CLEANUP_JOB = 'subscription-cleanup'
export const DEFAULT_CLEANUP_BATCH_SIZE = 500

/**
 * Payment mirror statuses that keep an unpaid subscription: one that can still complete, and one
 * that has completed (a GET of the payment refreshes the mirror) while its payment.completed event
 * is still on its way to the consumer that activates the subscription.
 */
const KEEPING_PAYMENT_STATUSES = ['pending', 'processing', 'completed']

export interface SubscriptionCleanupOptions {
  now: Date
  /** PENDING_SUBSCRIPTION_TTL */
  pendingTtlMs: number
  /** SUBSCRIPTION_GRACE_PERIOD */
  gracePeriodMs: number
  logger: Logger
  batchSize?: number
}

export interface SubscriptionCleanupResult {
  /** pending_payment subscriptions deleted. */
  deleted: number
  /** active -> expiring. */
  expiring: number
  /** expiring -> terminated. */
  terminated: number
  /** Terminate workflows started (a node whose run already existed is not counted). */
  terminations_started: number
}

/** One batch of unpaid subscriptions past the TTL; returns how many were deleted. */
async function deleteUnpaidBatch(trx: Tx, cutoff: Date, limit: number, after: string | undefined): Promise<{ deleted: number; examined: number; last: string | undefined }> {
  const query = trx('subscriptions').where('status', 'pending_payment').where('created_at', '<=', cutoff)
  // Past the protected rows of the previous batch, so they cannot fill every batch.
  if (after !== undefined) query.where('id', '>', after)
  const candidates = (await query
    .orderBy('id')
    .limit(limit)
    .select('id', 'payment_id', 'version')) as Array<{ id: string; payment_id: string | null; version: number | string }>
  if (candidates.length === 0) return { deleted: 0, examined: 0, last: after }
  const last = candidates[candidates.length - 1]?.id
  const paymentIds = [...new Set(candidates.map((c) => c.payment_id).filter((p): p is string => p !== null && isUuid(p)))]
  const open = new Set(
    paymentIds.length === 0
      ? []
      : ((await trx('payment_requests').whereIn('id', paymentIds).whereIn('status', KEEPING_PAYMENT_STATUSES).pluck('id')) as string[]).map((id) => id.toLowerCase()),
  )
  const doomed = candidates.filter((c) => c.payment_id === null || !open.has(c.payment_id.toLowerCase()))
  if (doomed.length === 0) return { deleted: 0, examined: candidates.length, last }
  // (id, version): a subscription linked to a payment (or otherwise changed) since it was read is kept.
  const deleted = await trx('subscriptions')
    .whereIn(['id', 'version'], doomed.map((d) => [d.id, Number(d.version)]))
    .where('status', 'pending_payment')
    .del()
  return { deleted, examined: candidates.length, last }
}

function expiringNotice(sub: MovedSubscription, graceEnds: Date) {
  return {
    userId: sub.user_id,
    kind: 'subscription_expiring' as const,
    title: 'Subscription expired: grace period started',
    body: `Your ${sub.chain_profile_id} ${sub.node_type} subscription ${sub.id} has expired. Its node keeps running until ${graceEnds.toISOString()}; after that it is terminated and its keys are deleted.`,
    data: { subscription_id: sub.id, grace_period_expires_at: graceEnds.toISOString() },
  }
}

function terminatedNotice(sub: MovedSubscription, nodes: number) {
  return {
    userId: sub.user_id,
    kind: 'subscription_terminated' as const,
    title: 'Subscription terminated',
    body: `Your ${sub.chain_profile_id} ${sub.node_type} subscription ${sub.id} ended with its grace period. ${nodes === 1 ? 'Its node is' : `Its ${nodes} nodes are`} being terminated and the keys deleted.`,
    data: { subscription_id: sub.id, nodes },
  }
}

async function expireBatch(trx: Tx, now: Date, gracePeriodMs: number, limit: number): Promise<number> {
  const graceEnds = new Date(now.getTime() + gracePeriodMs)
  const moved = await transitionSubscriptionsWhere(trx, {
    from: 'active',
    to: 'expiring',
    where: (q) => q.where('expires_at', '<=', now),
    set: { grace_period_expires_at: graceEnds },
    now,
    limit,
  })
  await createNotifications(trx, moved.map((sub) => expiringNotice(sub, graceEnds)), now)
  return moved.length
}

async function terminateBatch(trx: Tx, now: Date, limit: number): Promise<{ terminated: number; started: number }> {
  const moved = await transitionSubscriptionsWhere(trx, {
    from: 'expiring',
    to: 'terminated',
    where: (q) => q.where('grace_period_expires_at', '<=', now),
    now,
    limit,
  })
  if (moved.length === 0) return { terminated: 0, started: 0 }
  // Spec: keys are deleted when the subscription terminates. Its nodes' terminate workflows
  // delete the node keys and backups; the secrets the user gave go here, failed nodes or none.
  await deleteSealedInputs(trx, moved.map((m) => m.id))
  // Failed nodes too: the terminate workflow cleans up what they may still hold (host, keys).
  const nodes = (await trx('nodes')
    .whereIn('subscription_id', moved.map((m) => m.id))
    .whereNot('state', 'terminated')
    .orderBy('id')
    .select('id', 'subscription_id')) as Array<{ id: string; subscription_id: string }>
  let started = 0
  for (const node of nodes) {
    const { created } = await requestTermination(trx, node.id, `subscription ${node.subscription_id} terminated: grace period ended`, now)
    if (created) started++
  }
  const perSubscription = new Map<string, number>()
  for (const node of nodes) perSubscription.set(node.subscription_id, (perSubscription.get(node.subscription_id) ?? 0) + 1)
  await createNotifications(trx, moved.map((sub) => terminatedNotice(sub, perSubscription.get(sub.id) ?? 0)), now)
  return { terminated: moved.length, started }
}

/** One cleanup pass at `now`; every rule runs in batches until nothing matches. */
export async function runSubscriptionCleanup(db: Db, options: SubscriptionCleanupOptions): Promise<SubscriptionCleanupResult> {
  const { now, logger } = options
  const limit = options.batchSize ?? DEFAULT_CLEANUP_BATCH_SIZE
  const result: SubscriptionCleanupResult = { deleted: 0, expiring: 0, terminated: 0, terminations_started: 0 }

  const cutoff = new Date(now.getTime() - options.pendingTtlMs)
  let after: string | undefined
  for (;;) {
    const batch = await db.transaction((trx) => deleteUnpaidBatch(trx, cutoff, limit, after))
    result.deleted += batch.deleted
    after = batch.last
    if (batch.examined < limit) break
  }
  for (;;) {
    const moved = await db.transaction((trx) => expireBatch(trx, now, options.gracePeriodMs, limit))
    result.expiring += moved
    if (moved < limit) break
  }
  for (;;) {
    const batch = await db.transaction((trx) => terminateBatch(trx, now, limit))
    result.terminated += batch.terminated
    result.terminations_started += batch.started
    if (batch.terminated < limit) break
  }

  if (result.deleted + result.expiring + result.terminated > 0) logger.info({ ...result }, 'subscription cleanup')
  else logger.debug('subscription cleanup: nothing to do')
  return result
}

export interface SubscriptionCleanupSchedule extends JobSchedule {
  pendingTtlMs: number
  gracePeriodMs: number
  /** SUBSCRIPTION_CLEANUP_INTERVAL */
  intervalMs: number
  batchSize?: number
}

/** Runs `runSubscriptionCleanup` every interval on whichever replica holds the lease. */
export function scheduleSubscriptionCleanup(options: SubscriptionCleanupSchedule): PeriodicJob {
  return scheduleJobEvery(options, {
    name: SUBSCRIPTION_CLEANUP_JOB,
    intervalMs: options.intervalMs,
    run: async (now, logger) => {
      await runSubscriptionCleanup(options.db, {
        now,
        pendingTtlMs: options.pendingTtlMs,
        gracePeriodMs: options.gracePeriodMs,
        logger,
        ...(options.batchSize ? { batchSize: options.batchSize } : {}),
      })
    },
  })
}
