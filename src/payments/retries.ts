/**
 * Per-payment back-off of the periodic jobs that ask a provider about one payment (session
 * expiry closing its session, reconciliation asking for its status). A payment whose provider
 * call failed, or had nothing new, is asked again after 1, 2, 4 … minutes (at most an hour), not
 * on every run: a few payments the provider cannot settle no longer cost a call each per run,
 * nor hold up the payments behind them (issue 15: 102 stuck payments, 1,421 processor calls in
 * 90 s). One row per payment and job in `payment_retries`, removed when the job is done with it.
 */
import type { Knex } from 'knex'
import type { Queryable } from '../db/knex.js'

export type RetryJob = 'expiry' | 'reconciliation'

export const RETRY_BASE_DELAY_MS = 60_000
export const RETRY_MAX_DELAY_MS = 3_600_000

/** The wait after the `attempts`-th failed attempt (1-based). */
export function retryDelayMs(attempts: number): number {
  return Math.min(RETRY_MAX_DELAY_MS, RETRY_BASE_DELAY_MS * 2 ** Math.max(0, attempts - 1))
}

/** Restricts a query on `payments` to those `job` is not backing off from at `now`. */
export function notBackingOff(job: RetryJob, now: Date) {
  return (qb: Knex.QueryBuilder): void => {
    void qb.whereNotExists(function backingOff(this: Knex.QueryBuilder) {
      void this.select(1).from('payment_retries as r').whereRaw('r.payment_id = payments.id').where('r.job', job).where('r.retry_at', '>', now)
    })
  }
}

/** Counts one more failed attempt and sets when the next one is due; returns both. */
export async function recordRetry(db: Queryable, paymentId: string, job: RetryJob, error: string, now: Date): Promise<{ attempts: number; retryAt: Date }> {
  const row = (await db('payment_retries').where({ payment_id: paymentId, job }).first('attempts')) as { attempts: number | string } | undefined
  const attempts = Number(row?.attempts ?? 0) + 1
  const retryAt = new Date(now.getTime() + retryDelayMs(attempts))
  const values = { attempts, retry_at: retryAt, last_error: error.slice(0, 500), updated_at: now }
  await db('payment_retries')
    .insert({ payment_id: paymentId, job, ...values })
    .onConflict(['payment_id', 'job'])
    .merge(values)
  return { attempts, retryAt }
}

export async function clearRetry(db: Queryable, paymentId: string, job: RetryJob): Promise<void> {
  await db('payment_retries').where({ payment_id: paymentId, job }).delete()
}

/** Back-off rows of payments no job asks about any more (settled by a webhook, a cancel, …); returns how many. */
export async function forgetSettledRetries(db: Queryable): Promise<number> {
  return db('payment_retries')
    .whereIn('payment_id', (qb: Knex.QueryBuilder) => {
      void qb.select('id').from('payments').whereIn('status', ['completed', 'failed', 'canceled'])
    })
    .delete()
}
