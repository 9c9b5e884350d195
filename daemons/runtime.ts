/**
 * What every daemon of the control plane shares: its database, the event bus and an outbox
 * relay. Each process that writes outbox rows runs a relay; relays on one Postgres share the
 * rows through leases, so any number of processes may run one.
 */
import { ConfigError } from '../src/errors.js'
import { createDatabase, type Db } from '../src/db/knex.js'
import { probeDatabase } from '../src/db/probe.js'
import type { EventBus } from '../src/events/bus.js'
import { createLocalBus } from '../src/events/local-bus.js'
import { connectNatsBus } from '../src/events/nats-bus.js'
import { OutboxRelay } from '../src/events/relay.js'
import type { Logger } from '../src/log.js'

export interface BusConfig {
  NATS_URL?: string | undefined
}

/** A daemon started on its own must share events with the others, so it needs NATS. */
export function requireNats(config: BusConfig, daemon: string): string {
  if (!config.NATS_URL) {
    throw new ConfigError([
      `NATS_URL: required to run \`nodeplane daemon ${daemon}\` as a separate process (daemons exchange events over NATS JetStream); to run everything in one process without NATS, use \`nodeplane up\``,
    ])
  }
  return config.NATS_URL
}

export async function openBus(config: BusConfig, logger: Logger, name: string): Promise<EventBus> {
  return config.NATS_URL ? connectNatsBus({ url: config.NATS_URL, logger, name }) : createLocalBus()
}

export async function openDatabase(url: string, applicationName: string): Promise<Db> {
  await probeDatabase(url)
  return createDatabase(url, { applicationName })
}

export interface RelayConfig {
  OUTBOX_POLL_INTERVAL: number
}

export function startRelay(db: Db, bus: EventBus, config: RelayConfig, logger: Logger): OutboxRelay {
  const relay = new OutboxRelay({ db, bus, logger, pollIntervalMs: config.OUTBOX_POLL_INTERVAL })
  relay.start()
  return relay
}
