/**
 * `provider_events`: the webhook event ids already processed, kept so a redelivery is answered
 * `duplicate`. A delivery is accepted only within 5 minutes of its signed timestamp, so an id is
 * needed only while the processor may still redeliver it; older ones are purged by a periodic
 * job (PAYMENT_PROVIDER_EVENT_RETENTION, default 3 days: the processor's redelivery window).
 */
import type { Queryable } from '../db/knex.js'

/** Deletes events processed before `before`; returns how many. */
export async function purgeProviderEvents(db: Queryable, before: Date): Promise<number> {
  return db('provider_events').where('processed_at', '<', before).delete()
}
