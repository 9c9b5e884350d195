/**
 * Database leases for periodic jobs (table `job_leases`): a job runs only where its lease is
 * held, so two replicas never run the same job at once. A holder renews by acquiring again; a
 * lease whose holder died is taken over once it expires. Each step is one atomic statement,
 * so this is race-free on both dialects without explicit locking.
 */
import { toDate } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { isUniqueViolation } from '../db/errors.js'

export interface LeaseHolding {
  holder: string
  /** When the holder last took or renewed it. */
  acquiredAt: Date
  expiresAt: Date
}

/** Who holds the job's lease now (an expired one included); undefined when nobody does. */
export async function readLease(db: Queryable, name: string): Promise<LeaseHolding | undefined> {
  const row = (await db('job_leases').where({ name }).first('holder', 'acquired_at', 'expires_at')) as { holder: string; acquired_at: unknown; expires_at: unknown } | undefined
  return row ? { holder: row.holder, acquiredAt: toDate(row.acquired_at), expiresAt: toDate(row.expires_at) } : undefined
}

export async function tryAcquireLease(db: Queryable, name: string, holder: string, ttlMs: number, now: Date = new Date()): Promise<boolean> {
  const expiresAt = new Date(now.getTime() + ttlMs)
  const taken = await db('job_leases')
    .where({ name })
    .andWhere((q) => q.where('expires_at', '<=', now).orWhere({ holder }))
    .update({ holder, acquired_at: now, expires_at: expiresAt })
  if (taken === 1) return true
  try {
    await db('job_leases').insert({ name, holder, acquired_at: now, expires_at: expiresAt })
    return true
  } catch (err) {
    if (isUniqueViolation(err)) return false
    throw err
  }
}

export async function releaseLease(db: Queryable, name: string, holder: string): Promise<void> {
  await db('job_leases').where({ name, holder }).del()
}
