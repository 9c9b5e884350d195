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
import { natsSettingsFromDir, ownedStreams, type NatsService } from './nats-security.js'

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

/** `nodeplane up`'s buses: the control plane's and the payment service's (the same one unless NATS_DIR). */
export interface StackBuses {
  controlPlane: EventBus
  payments: EventBus
  close(): Promise<void>
}

/**
 * `nodeplane up` runs both services in one process. On the in-process bus, or on a NATS without
 * per-service users, one connection serves both. With NATS_DIR (a `nodeplane certs nats`
 * directory) each service connects as its own NATS user over mutual TLS, exactly as the split
 * daemons do, so `up` works against a NATS that enforces the per-service permissions.
 */
export async function openStackBuses(options: { settings: NatsSettings & { NATS_DIR?: string | undefined }; logger: Logger; name: string }): Promise<StackBuses> {
  const { NATS_DIR: dir, ...settings } = options.settings
  if (!dir) {
    const bus = await openEventBus({ settings, service: undefined, singleProcess: true, logger: options.logger, name: options.name })
    return { controlPlane: bus, payments: bus, close: () => bus.close() }
  }
  const given = (['NATS_CA_FILE', 'NATS_CERT_FILE', 'NATS_KEY_FILE', 'NATS_NKEY_SEED_FILE', 'NATS_NKEY_SEED'] as const).filter((name) => settings[name] !== undefined)
  const problems = [
    ...(settings.NATS_URL ? [] : ['NATS_DIR: needs NATS_URL (the NATS server its files are for)']),
    ...(given.length > 0 ? [`NATS_DIR and ${given.join(', ')}: set NATS_DIR (one identity per service) or the single identity's files, not both`] : []),
  ]
  if (problems.length > 0) throw new ConfigError(problems)
  const url = settings.NATS_URL as string
  const open = (service: NatsService) =>
    openEventBus({ settings: natsSettingsFromDir(url, dir, service), service, singleProcess: true, logger: options.logger, name: `${options.name}-${service}` })
  const controlPlane = await open('control-plane')
  let payments: EventBus
  try {
    payments = await open('payment-service')
  } catch (err) {
    await controlPlane.close()
    throw err
  }
  return {
    controlPlane,
    payments,
    close: async () => {
      await payments.close()
      await controlPlane.close()
    },
  }
}
