/**
 * What every control-plane daemon shares: its database and an outbox relay. Each process that
 * writes outbox rows runs a relay; relays on one Postgres share the rows through leases, so any
 * number of processes may run one. The bus comes from `openEventBus` (src/events).
 */
import { createDatabase, type Db } from '../src/db/knex.js'
import { probeDatabase } from '../src/db/probe.js'
import type { EventBus } from '../src/events/bus.js'
import { scheduleEventsHousekeeping } from '../src/events/housekeeping.js'
import type { PeriodicJob } from '../src/jobs/periodic.js'
import { OutboxRelay } from '../src/events/relay.js'
import type { Logger } from '../src/log.js'

export async function openDatabase(url: string, applicationName: string, logger?: Logger): Promise<Db> {
  await probeDatabase(url)
  return createDatabase(url, { applicationName, ...(logger ? { logger } : {}) })
}

export function startRelay(db: Db, bus: EventBus, config: { OUTBOX_POLL_INTERVAL: number }, logger: Logger): OutboxRelay {
  const relay = new OutboxRelay({ db, bus, logger, pollIntervalMs: config.OUTBOX_POLL_INTERVAL })
  relay.start()
  return relay
}

export function startHousekeeping(db: Db, config: { OUTBOX_RETENTION: number }, logger: Logger): PeriodicJob {
  return scheduleEventsHousekeeping({ db, logger, outboxRetentionMs: config.OUTBOX_RETENTION })
}
