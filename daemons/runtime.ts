/**
 * What every control-plane daemon shares: its database and an outbox relay. Each process that
 * writes outbox rows runs a relay; relays on one Postgres share the rows through leases, so any
 * number of processes may run one. The bus comes from `openEventBus` (src/events).
 */
import { createDatabase, type Db } from '../src/db/knex.js'
import { probeDatabase } from '../src/db/probe.js'
import type { EventBus } from '../src/events/bus.js'
import { OutboxRelay } from '../src/events/relay.js'
import type { Logger } from '../src/log.js'

export async function openDatabase(url: string, applicationName: string): Promise<Db> {
  await probeDatabase(url)
  return createDatabase(url, { applicationName })
}

export function startRelay(db: Db, bus: EventBus, config: { OUTBOX_POLL_INTERVAL: number }, logger: Logger): OutboxRelay {
  const relay = new OutboxRelay({ db, bus, logger, pollIntervalMs: config.OUTBOX_POLL_INTERVAL })
  relay.start()
  return relay
}
