/**
 * Paid but never provisioned (issue 15, item 7; docs/node-lifecycle.md): an active subscription
 * whose node failed to provision gets new provision attempts, a bounded number with exponential
 * backoff, then an incident for operators and a notification to the user; an operator can start
 * over with `reprovisionSubscription` (POST /api/v1/subscriptions/{id}/reprovision).
 *
 * A subscription is *stranded* when it is `active`, has no live node, and either its newest node
 * is `failed` with a failed `provision` run, or it has no node at all although a payment activated
 * it (`activated_at` set; activation creates the node in the same transaction, so only a hand-made
 * row or a deleted node gets there). A node that failed later (a migration) or that someone
 * terminated is not a provisioning failure: operators handle those (the `migration_failed`
 * incident; `subscription reprovision`).
 *
 * One pass of the job (`runProvisionRetries`), per stranded subscription, each in its own
 * transaction with the subscription row locked, against `provision_retries`:
 *  - a failure not acted on yet (no row, or `next_attempt_at` null): with budget left, schedule
 *    the next retry at now + backoff · 2^attempts (capped); without, exhaust: one
 *    `provision_failed` incident on the newest node, restated for the subscription, and a
 *    `subscription_provision_failed` notification; the row keeps `exhausted_at`, and the job
 *    leaves the subscription to operators from then on;
 *  - a retry that is due: a new node in `provisioning` and its provision workflow (key = node id),
 *    `attempts` + 1, `next_attempt_at` null until that node fails in turn.
 * If the process dies between passes, nothing is half-written: each step commits with its row.
 * Two provisions cannot start for one subscription: the live-node check runs under the row
 * lock, and the partial unique index `nodes_one_live_per_subscription_uq` refuses a second live
 * node anyway (the loser's transaction rolls back; the reprovision route answers 409).
 */
import type { Knex } from 'knex'
import { lockRow, toDateOrNull } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { isUuid } from '../db/ids.js'
import type { Db, Queryable, Tx } from '../db/knex.js'
import { ConflictError, NotFoundError } from '../errors.js'
import { raiseIncident } from '../health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS, type FlappingRule } from '../health/incident-rules.js'
import { scheduleJobEvery, type JobSchedule, type PeriodicJob } from '../jobs/periodic.js'
import type { Logger } from '../log.js'
import { TERMINAL_NODE_STATES } from '../nodes/states.js'
import { createNotification } from '../notifications/notifications.js'
import { PROVISION_WORKFLOW } from '../provisioning/provision.js'
import { provisionNode } from './activation.js'

export const PROVISION_RETRY_JOB = 'provision-retry'

export interface ProvisionRetrySettings {
  /** PROVISION_RETRY_ATTEMPTS: retries after the provision the payment started. */
  maxAttempts: number
  /** PROVISION_RETRY_BACKOFF: the wait before the first retry; it doubles for each one after. */
  backoffMs: number
  /** PROVISION_RETRY_BACKOFF_MAX: no wait is longer. */
  maxBackoffMs: number
}

export const DEFAULT_PROVISION_RETRY: ProvisionRetrySettings = { maxAttempts: 3, backoffMs: 2 * 60_000, maxBackoffMs: 60 * 60_000 }

/** The wait before retry number `attempts + 1`. */
export function retryDelayMs(attempts: number, settings: ProvisionRetrySettings): number {
  return Math.min(settings.maxBackoffMs, settings.backoffMs * 2 ** Math.min(attempts, 30))
}

interface SubscriptionRow {
  id: string
  user_id: string
  chain_profile_id: string
  node_type: string
  provider: string
  region: string
  instance_type: string
  status: string
}

interface RetryRow {
  attempts: number
  next_attempt_at: Date | null
  exhausted_at: Date | null
}

const SUBSCRIPTION_COLUMNS = ['id', 'user_id', 'chain_profile_id', 'node_type', 'provider', 'region', 'instance_type', 'status'] as const

/** Stranded subscriptions (see the header). */
function strandedQuery(db: Queryable): Knex.QueryBuilder {
  return db('subscriptions as s')
    .where('s.status', 'active')
    .whereNotExists((q) => q.select(db.raw('1')).from('nodes as live').whereRaw('live.subscription_id = s.id').whereNotIn('live.state', TERMINAL_NODE_STATES))
    .andWhere((either) =>
      either
        .where((nodeless) => nodeless.whereNotNull('s.activated_at').whereNotExists((q) => q.select(db.raw('1')).from('nodes as any_node').whereRaw('any_node.subscription_id = s.id')))
        .orWhereExists((q) =>
          q
            .select(db.raw('1'))
            .from('nodes as f')
            .join('workflow_runs as w', (on) => on.on('w.workflow_key', '=', db.raw('CAST(f.id AS VARCHAR(36))')).andOnVal('w.workflow_name', '=', PROVISION_WORKFLOW))
            .whereRaw('f.subscription_id = s.id')
            .where('f.state', 'failed')
            .where('w.status', 'failed')
            .whereNotExists((newer) =>
              newer
                .select(db.raw('1'))
                .from('nodes as n2')
                .whereRaw('n2.subscription_id = s.id')
                .andWhere((later) => later.whereRaw('n2.created_at > f.created_at').orWhereRaw('n2.created_at = f.created_at and n2.id > f.id')),
            ),
        ),
    )
}

async function newestNode(db: Queryable, subscriptionId: string): Promise<{ id: string; state: string } | undefined> {
  return (await db('nodes').where({ subscription_id: subscriptionId }).orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id', order: 'desc' }]).first('id', 'state')) as
    | { id: string; state: string }
    | undefined
}

async function readRetry(db: Queryable, subscriptionId: string): Promise<RetryRow | undefined> {
  const row = (await db('provision_retries').where({ subscription_id: subscriptionId }).first('attempts', 'next_attempt_at', 'exhausted_at')) as Record<string, unknown> | undefined
  if (!row) return undefined
  return { attempts: Number(row.attempts), next_attempt_at: toDateOrNull(row.next_attempt_at), exhausted_at: toDateOrNull(row.exhausted_at) }
}

async function writeRetry(db: Queryable, subscriptionId: string, fields: Record<string, unknown>, now: Date): Promise<void> {
  const updated = await db('provision_retries').where({ subscription_id: subscriptionId }).update({ ...fields, updated_at: now })
  if (updated === 0) await db('provision_retries').insert({ subscription_id: subscriptionId, attempts: 0, ...fields, created_at: now, updated_at: now })
}

export type RetryAction = 'scheduled' | 'started' | 'exhausted' | 'waiting' | 'skipped'

export interface ProvisionRetryOptions {
  now: Date
  settings: ProvisionRetrySettings
  logger: Logger
  flapping?: FlappingRule
  /** Stranded subscriptions handled per pass (the oldest by id first). */
  limit?: number
}

export interface ProvisionRetryResult {
  scheduled: number
  started: number
  exhausted: number
}

async function exhaust(trx: Tx, sub: SubscriptionRow, nodeId: string, attempts: number, options: ProvisionRetryOptions): Promise<string> {
  const { now } = options
  const remedy = `nodeplane subscription reprovision --id ${sub.id}`
  const raised = await raiseIncident(
    trx,
    {
      nodeId,
      subscriptionId: sub.id,
      chainProfileId: sub.chain_profile_id,
      category: 'provision_failed',
      occurredAt: now,
      title: `${sub.chain_profile_id} subscription ${sub.id.slice(0, 8)}: paid, but no node after ${attempts + 1} provisioning attempt(s)`,
      description: `Subscription ${sub.id} is active (paid) and has no node: provisioning failed ${attempts + 1} time(s), the last on node ${nodeId}, and the automatic retries are used up. Find the cause in the failed provision runs (\`nodeplane workflow list --status failed\`), then re-provision with \`${remedy}\`.`,
      metadata: { trigger: 'provision_retries_exhausted', subscription_id: sub.id, attempts: attempts + 1, last_node_id: nodeId, remedy },
      restate: true,
    },
    options.flapping ?? DEFAULT_INCIDENT_SETTINGS.flapping,
    now,
  )
  await createNotification(
    trx,
    {
      userId: sub.user_id,
      kind: 'subscription_provision_failed',
      title: 'Your node could not be started',
      body: `Your ${sub.chain_profile_id} ${sub.node_type} subscription ${sub.id} is paid, but its node failed to start ${attempts + 1} time(s). Our operators have been alerted (incident ${raised.incident.id}) and will start it; you do not need to pay again.`,
      data: { subscription_id: sub.id, incident_id: raised.incident.id, node_id: nodeId, attempts: attempts + 1 },
    },
    now,
  )
  await writeRetry(trx, sub.id, { exhausted_at: now, next_attempt_at: null, incident_id: raised.incident.id }, now)
  return raised.incident.id
}

/** One stranded subscription, in its own transaction; re-checked under the row lock. */
async function handleStranded(db: Db, subscriptionId: string, options: ProvisionRetryOptions): Promise<RetryAction> {
  const { now, settings, logger } = options
  return db.transaction(async (trx) => {
    const sub = (await lockRow(trx, strandedQuery(trx).where('s.id', subscriptionId).first(...SUBSCRIPTION_COLUMNS.map((c) => `s.${c}`)))) as SubscriptionRow | undefined
    if (!sub) return 'skipped'
    const retry = await readRetry(trx, sub.id)
    if (retry?.exhausted_at) return 'skipped'
    const attempts = retry?.attempts ?? 0
    const log = logger.child({ subscription_id: sub.id })
    if (retry?.next_attempt_at) {
      if (retry.next_attempt_at.getTime() > now.getTime()) return 'waiting'
      const started = await provisionNode(trx, sub, now)
      await writeRetry(trx, sub.id, { attempts: attempts + 1, next_attempt_at: null, last_node_id: started.node_id }, now)
      log.warn({ node_id: started.node_id, workflow_run_id: started.workflow_run_id, attempt: attempts + 1, of: settings.maxAttempts }, 'provisioning retried for a paid subscription without a node')
      return 'started'
    }
    const newest = await newestNode(trx, sub.id)
    if (attempts >= settings.maxAttempts && newest) {
      const incidentId = await exhaust(trx, sub, newest.id, attempts, options)
      log.error({ node_id: newest.id, attempts, incident_id: incidentId }, 'provisioning retries exhausted for a paid subscription: incident opened, user notified')
      return 'exhausted'
    }
    const at = new Date(now.getTime() + retryDelayMs(attempts, settings))
    await writeRetry(trx, sub.id, { next_attempt_at: at, ...(newest ? { last_node_id: newest.id } : {}) }, now)
    log.warn({ node_id: newest?.id ?? null, next_attempt_at: at.toISOString(), attempt: attempts + 1, of: settings.maxAttempts }, 'provisioning failed for a paid subscription: retry scheduled')
    return 'scheduled'
  })
}

/** One pass of the job at `now` (see the header). */
export async function runProvisionRetries(db: Db, options: ProvisionRetryOptions): Promise<ProvisionRetryResult> {
  const result: ProvisionRetryResult = { scheduled: 0, started: 0, exhausted: 0 }
  const ids = (await strandedQuery(db)
    .leftJoin('provision_retries as r', 'r.subscription_id', 's.id')
    .whereNull('r.exhausted_at')
    .andWhere((due) => due.whereNull('r.next_attempt_at').orWhere('r.next_attempt_at', '<=', options.now))
    .orderBy('s.id')
    .limit(options.limit ?? 100)
    .pluck('s.id')) as string[]
  for (const id of ids) {
    try {
      const action = await handleStranded(db, id, options)
      if (action === 'scheduled' || action === 'started' || action === 'exhausted') result[action]++
    } catch (err) {
      // A concurrent reprovision won the live-node index: nothing is stranded any more.
      if (isUniqueViolation(err)) continue
      options.logger.error({ err, subscription_id: id }, 'provisioning retry failed; tried again next pass')
    }
  }
  if (result.scheduled + result.started + result.exhausted > 0) options.logger.info({ ...result }, 'provisioning retries')
  return result
}

export interface ProvisionRetrySchedule extends JobSchedule {
  settings: ProvisionRetrySettings
  /** PROVISION_RETRY_INTERVAL */
  intervalMs: number
  flapping?: FlappingRule
}

/** Runs `runProvisionRetries` every interval on whichever replica holds the lease `provision-retry`. */
export function scheduleProvisionRetries(options: ProvisionRetrySchedule): PeriodicJob {
  return scheduleJobEvery(options, {
    name: PROVISION_RETRY_JOB,
    intervalMs: options.intervalMs,
    run: async (now, logger) => {
      await runProvisionRetries(options.db, { now, settings: options.settings, logger, ...(options.flapping ? { flapping: options.flapping } : {}) })
    },
  })
}

export interface ReprovisionResult {
  subscription_id: string
  node_id: string
  workflow_run_id: string
  /** The node it replaces (the newest one), if any. */
  previous_node_id: string | null
}

/**
 * The operator's re-provision: a new node and its provision run for an active subscription
 * without a live node, and a fresh retry budget (attempts 0, no longer exhausted). 404 unknown or malformed id; 409 when the
 * subscription is not active or already has a live node.
 */
export async function reprovisionSubscription(
  db: Db,
  request: { subscriptionId: string; by: string; now: Date },
): Promise<ReprovisionResult> {
  const notFound = () => new NotFoundError('not found', 'no subscription with this id')
  if (!isUuid(request.subscriptionId)) throw notFound()
  const id = request.subscriptionId.toLowerCase()
  const { now } = request
  try {
    return await db.transaction(async (trx) => {
      const sub = (await lockRow(trx, trx('subscriptions').where({ id }).first(...SUBSCRIPTION_COLUMNS))) as SubscriptionRow | undefined
      if (!sub) throw notFound()
      if (sub.status !== 'active') {
        throw new ConflictError(`subscription ${id} is ${sub.status}`, 'only an active subscription (paid and within its term) is re-provisioned')
      }
      const live = (await trx('nodes').where({ subscription_id: id }).whereNotIn('state', TERMINAL_NODE_STATES).first('id', 'state')) as { id: string; state: string } | undefined
      if (live) throw liveNodeConflict(id, live)
      const previous = await newestNode(trx, id)
      const started = await provisionNode(trx, sub, now)
      await writeRetry(trx, id, { attempts: 0, next_attempt_at: null, exhausted_at: null, incident_id: null, last_node_id: started.node_id, reset_by: request.by, reset_at: now }, now)
      return {
        subscription_id: id,
        node_id: started.node_id,
        workflow_run_id: started.workflow_run_id,
        previous_node_id: previous?.id ?? null,
      }
    })
  } catch (err) {
    // Another reprovision (or the retry job) inserted the live node first.
    if (isUniqueViolation(err)) {
      const live = (await db('nodes').where({ subscription_id: id }).whereNotIn('state', TERMINAL_NODE_STATES).first('id', 'state')) as { id: string; state: string } | undefined
      throw liveNodeConflict(id, live ?? { id: 'unknown', state: 'provisioning' })
    }
    throw err
  }
}

function liveNodeConflict(subscriptionId: string, live: { id: string; state: string }): ConflictError {
  return new ConflictError(`subscription ${subscriptionId} already has a live node ${live.id} (${live.state})`, 'follow it with `nodeplane node show --id <node>`; terminate it first if it must be replaced')
}
