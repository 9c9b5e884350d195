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

export interface OpenEventBusOptions {
  /** NATS_URL, if set. */
  natsUrl: string | undefined
  /** True only for `nodeplane up`, where every daemon shares this process. */
  singleProcess: boolean
  logger: Logger
  /** Connection name, e.g. the daemon name. */
  name: string
  nats?: Omit<NatsBusOptions, 'url' | 'logger' | 'name'>
}

export async function openEventBus(options: OpenEventBusOptions): Promise<EventBus> {
  if (options.natsUrl) {
    // Loaded only with NATS: `nodeplane up` on its in-process bus never needs the client.
    const { connectNatsBus } = await import('./nats-bus.js')
    return connectNatsBus({ ...options.nats, url: options.natsUrl, logger: options.logger, name: options.name })
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
