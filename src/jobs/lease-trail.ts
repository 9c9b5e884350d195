/**
 * The operator's trail of a singleton job's lease (issue 22, item 5): which replica stands by
 * behind which holder, when the holder stops renewing (it was killed, or lost the database) and
 * the standby waits for its lease to run out, and when the standby takes the job over — with
 * how long the job went without a holder. One line per event, not one per tick.
 *
 * A live holder renews at every tick and every third of the lease while a tick runs, so a lease
 * not renewed for two thirds of its length, and for at least an interval plus 10 s (twice the
 * clock skew docs/deploy.md allows: the holder's clock wrote the renewal, ours reads it), has a
 * holder that is gone. Without a known interval, the interval is taken as two thirds of the lease
 * (the housekeeping jobs: a 90 s lease renewed every minute).
 */
import type { Logger } from '../log.js'
import type { LeaseHolding } from './lease.js'

export interface LeaseTrail {
  /** After each attempt: `before` is the lease as read just before it, `acquired` the outcome. */
  observe(before: LeaseHolding | undefined, acquired: boolean, now: Date): void
}

export function createLeaseTrail(options: { logger: Logger; holder: string; leaseMs: number; intervalMs?: number | undefined }): LeaseTrail {
  const { logger, holder, leaseMs } = options
  const intervalMs = options.intervalMs ?? Math.floor((2 * leaseMs) / 3)
  const staleAfterMs = Math.max(Math.floor((2 * leaseMs) / 3), intervalMs + 10_000)
  let standingBehind: string | undefined
  /** The renewal (holder and time) already reported as stale, so it is reported once. */
  let reportedStale: string | undefined

  return {
    observe(before, acquired, now) {
      const other = before && before.holder !== holder ? before : undefined
      if (acquired) {
        if (other) {
          logger.warn(
            {
              previous_holder: other.holder,
              last_renewed_at: other.acquiredAt.toISOString(),
              lease_expired_at: other.expiresAt.toISOString(),
              without_holder_ms: now.getTime() - other.acquiredAt.getTime(),
            },
            'took over the job lease from a holder that stopped renewing it',
          )
        }
        standingBehind = undefined
        reportedStale = undefined
        return
      }
      if (!other) return
      if (standingBehind !== other.holder) {
        standingBehind = other.holder
        logger.info({ lease_holder: other.holder, lease_expires_at: other.expiresAt.toISOString() }, 'job lease held by another replica; standing by')
      }
      const renewal = `${other.holder}@${other.acquiredAt.getTime()}`
      if (now.getTime() - other.acquiredAt.getTime() >= staleAfterMs && reportedStale !== renewal) {
        reportedStale = renewal
        logger.warn(
          {
            lease_holder: other.holder,
            last_renewed_at: other.acquiredAt.toISOString(),
            lease_expires_at: other.expiresAt.toISOString(),
            takeover_in_ms: Math.max(0, other.expiresAt.getTime() - now.getTime()),
          },
          'job lease holder stopped renewing it; waiting for the lease to expire before taking the job over',
        )
      }
    },
  }
}
