import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import { schedulePeriodicJob, type PeriodicJob } from '../jobs/periodic.js'
import { purgeExpired } from './idempotency.js'
import { purgePublished } from './relay.js'

export interface EventsHousekeepingOptions {
  db: Db
  logger: Logger
  /** Published outbox rows older than this are deleted (OUTBOX_RETENTION). */
  outboxRetentionMs: number
  now?: () => Date
}

/** Once a minute, by one replica: drop expired idempotency keys and old published outbox rows. */
export function scheduleEventsHousekeeping(options: EventsHousekeepingOptions): PeriodicJob {
  return schedulePeriodicJob({
    name: 'events-housekeeping',
    cronTime: '0 * * * * *',
    leaseMs: 90_000,
    db: options.db,
    logger: options.logger,
    now: options.now,
    run: async (now) => {
      const keys = await purgeExpired(options.db, now)
      const rows = await purgePublished(options.db, new Date(now.getTime() - options.outboxRetentionMs))
      if (keys + rows > 0) options.logger.info({ idempotency_keys: keys, outbox_rows: rows }, 'events housekeeping')
    },
  })
}
