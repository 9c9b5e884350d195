/**
 * Chooses the bus adapter: NATS JetStream whenever NATS_URL is set; the in-process bus only for
 * the single-process `nodeplane up`. A daemon started on its own without NATS_URL is refused:
 * an in-process bus would silently cut it off from the other daemons (its events would never
 * leave the process and it would never see theirs).
 */
import { ConfigError } from '../errors.js'
import type { Logger } from '../log.js'
import type { EventBus } from './bus.js'
import { createLocalBus } from './local-bus.js'
import type { NatsBusOptions } from './nats-bus.js'
import { natsConnectionSettings, type NatsSettings } from './nats-connection.js'
import { ownedStreams, type NatsService } from './nats-security.js'

export interface OpenEventBusOptions {
  /** NATS_URL (NATS is used when it is set) and the TLS and credential files. */
  settings: NatsSettings
  /**
   * Whose NATS user this process is: it then owns only that service's streams and reads replies
   * under that service's inbox prefix. Undefined in `nodeplane up`, which runs both.
   */
  service: NatsService | undefined
  /** True only for `nodeplane up`, where every daemon shares this process. */
  singleProcess: boolean
  logger: Logger
  /** Connection name, e.g. the daemon name. */
  name: string
  nats?: Omit<NatsBusOptions, 'url' | 'logger' | 'name'>
}

export async function openEventBus(options: OpenEventBusOptions): Promise<EventBus> {
  const url = options.settings.NATS_URL
  if (url) {
    const connection = natsConnectionSettings(options.settings, options.service)
    // Loaded only with NATS: `nodeplane up` on its in-process bus never needs the client.
    const { connectNatsBus } = await import('./nats-bus.js')
    return connectNatsBus({
      ...options.nats,
      connection: { ...connection, ...options.nats?.connection },
      ...(options.service ? { ownedStreams: ownedStreams(options.service) } : {}),
      url,
      logger: options.logger,
      name: options.name,
    })
  }
  if (!options.singleProcess) {
    throw new ConfigError([
      'NATS_URL: required when a daemon runs as its own process (set it to nats://host:4222); ' +
        'only `nodeplane up` runs without NATS, on an in-process bus',
    ])
  }
  options.logger.info('NATS_URL not set: using the in-process event bus (single process only)')
  return createLocalBus({ logger: options.logger })
}
