/**
 * EventBus on NATS JetStream, used whenever NATS_URL is set (docs/events.md).
 *
 * - Streams: every stream in STREAMS the process owns (`ownedStreams`, default all) is created
 *   (file storage, limits retention) or updated so its subjects are held and its duplicate window
 *   is at least `duplicateWindowMs`; limits an operator set on an existing stream (max age, max
 *   bytes…) are left alone. A stream it only reads is created at subscribe time when missing.
 * - Publish: `js.publish` with `msgID` = the outbox message id, awaiting the PubAck. While the
 *   connection is down it throws at once (and after `publishTimeoutMs` at worst), so the relay
 *   backs off and keeps the rows instead of hanging.
 * - Subscribe: a durable pull consumer (explicit ack, deliver all, unlimited redeliveries) on the
 *   one stream holding the filter, consumed with `consume()`; the client re-pulls across
 *   reconnects on its own.
 * - The connection reconnects forever.
 * - Security (docs/events.md): TLS and the nkey come in `connection`; a process updates only the
 *   streams it publishes on (`ownedStreams`), which is all its NATS user may change.
 */
import {
  AckPolicy,
  ConsumerEvents,
  DeliverPolicy,
  Events,
  NatsError,
  RetentionPolicy,
  StorageType,
  connect,
  headers as natsHeaders,
  nanos,
  type ConnectionOptions,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type MsgHdrs,
  type NatsConnection,
  type Status,
  type StreamInfo,
} from 'nats'
import { ConflictError, UnavailableError } from '../errors.js'
import type { Logger } from '../log.js'
import { STREAMS, type BusComponentHealth, type BusMessage, type BusPublish, type BusSubscription, type EventBus, type SubscribeOptions } from './bus.js'
import { streamForFilter } from './subjects.js'

export interface NatsBusOptions {
  url: string
  logger: Logger
  /** Connection name shown by `nats server report connections`, e.g. the daemon name. */
  name: string
  /** Longest wait for a PubAck. */
  publishTimeoutMs?: number
  /** Timeout of JetStream API requests (stream/consumer management, health). */
  requestTimeoutMs?: number
  /**
   * Stream duplicate window. It must exceed the relay's lease plus any outage during which a
   * relay could have published a row without recording it; 10 minutes by default.
   */
  duplicateWindowMs?: number
  /** Ack wait for subscriptions that set none. */
  ackWaitMs?: number
  reconnectTimeWaitMs?: number
  /** TLS, credentials and other connection settings (`natsConnectionSettings`). */
  connection?: Omit<ConnectionOptions, 'servers' | 'name' | 'maxReconnectAttempts'>
  /**
   * Streams this process publishes on: it creates and updates them. Any other stream it only
   * creates when missing, never changes (its user may not). Default: all.
   */
  ownedStreams?: readonly string[]
}

/** JetStream API error codes we branch on. */
const STREAM_NOT_FOUND = 10059
const STREAM_NAME_IN_USE = 10058
const CONSUMER_NOT_FOUND = 10014
const NATS_MSG_ID = 'Nats-Msg-Id'

function apiErrorCode(err: unknown): number | undefined {
  return err instanceof NatsError ? err.api_error?.err_code : undefined
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function headersToRecord(h: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  if (!h) return out
  for (const key of h.keys()) out[key] = h.get(key)
  return out
}

function toBusMessage(m: JsMsg): BusMessage & { readonly settled: boolean } {
  let settled = false
  const once = (fn: () => void) => {
    if (settled) return
    settled = true
    fn()
  }
  return {
    subject: m.subject,
    data: m.data,
    messageId: m.headers?.get(NATS_MSG_ID) || undefined,
    headers: headersToRecord(m.headers),
    deliveryCount: m.info.deliveryCount,
    get settled() {
      return settled
    },
    ack: () => once(() => m.ack()),
    nak: (delayMs?: number) => once(() => m.nak(delayMs && delayMs > 0 ? Math.round(delayMs) : undefined)),
    term: () => once(() => m.term()),
  }
}

export async function connectNatsBus(options: NatsBusOptions): Promise<EventBus> {
  const log = options.logger.child({ component: 'nats-bus' })
  const publishTimeoutMs = options.publishTimeoutMs ?? 5_000
  const requestTimeoutMs = options.requestTimeoutMs ?? 5_000
  const duplicateWindowMs = options.duplicateWindowMs ?? 10 * 60_000
  const defaultAckWaitMs = options.ackWaitMs ?? 30_000
  const owned: readonly string[] = options.ownedStreams ?? STREAMS.map((s) => s.name)
  const ensuredForReading = new Set<string>()

  let nc: NatsConnection
  try {
    nc = await connect({
      ...options.connection,
      servers: options.url,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: options.reconnectTimeWaitMs ?? 1_000,
    })
  } catch (err) {
    throw new UnavailableError(
      `cannot connect to NATS: ${errorText(err)}`,
      'check NATS_URL, that nats-server is running with JetStream, and NATS_CA_FILE, NATS_CERT_FILE, NATS_KEY_FILE and NATS_NKEY_SEED_FILE',
    )
  }

  let connected = true
  let closing = false
  const reconnectListeners = new Set<() => void>()
  const subscriptions = new Set<BusSubscription>()
  let jsm: JetStreamManager
  let healthJsm: JetStreamManager
  let js: JetStreamClient
  try {
    jsm = await nc.jetstreamManager({ timeout: requestTimeoutMs })
    healthJsm = await nc.jetstreamManager({ timeout: Math.min(requestTimeoutMs, 2_000), checkAPI: false })
    js = nc.jetstream({ timeout: publishTimeoutMs })
    for (const spec of STREAMS) if (owned.includes(spec.name)) await ensureStream(jsm, spec, duplicateWindowMs, true, log)
  } catch (err) {
    await nc.close().catch(() => undefined)
    throw new UnavailableError(`NATS JetStream is not usable: ${errorText(err)}`, 'the server must run with JetStream enabled (-js)')
  }

  // Typed as a plain AsyncIterable, but it is a queued iterator that close() must stop: the
  // client does not end connection-level status iterators when the connection closes.
  const statuses = nc.status() as AsyncIterable<Status> & { stop?: () => void }
  const statusDone = (async () => {
    for await (const status of statuses) {
      if (status.type === Events.Disconnect) {
        connected = false
        log.warn({ server: status.data }, 'disconnected from NATS; reconnecting')
      } else if (status.type === Events.Reconnect) {
        connected = true
        log.info({ server: status.data }, 'reconnected to NATS')
        for (const listener of reconnectListeners) listener()
      } else if (status.type === Events.Error) {
        log.warn({ error: status.data }, 'NATS connection error')
      }
    }
  })()
  void nc.closed().then((err) => {
    connected = false
    if (err) log.error({ err }, 'NATS connection closed with an error')
  })

  async function ensureConsumer(stream: string, durable: string, filter: string, ackWaitMs: number): Promise<void> {
    let info: ConsumerInfo | undefined
    try {
      info = await jsm.consumers.info(stream, durable)
    } catch (err) {
      if (apiErrorCode(err) !== CONSUMER_NOT_FOUND) throw err
    }
    if (!info) {
      await jsm.consumers.add(stream, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        ack_wait: nanos(ackWaitMs),
        deliver_policy: DeliverPolicy.All,
        filter_subject: filter,
        max_deliver: -1,
      })
      log.info({ stream, durable, filter }, 'durable consumer created')
      return
    }
    if ((info.config.filter_subject ?? '') !== filter) {
      throw new ConflictError(
        `durable consumer ${durable} on ${stream} reads "${info.config.filter_subject ?? ''}", not "${filter}"`,
        `delete it (nats consumer rm ${stream} ${durable}) or use another durable name`,
      )
    }
    if (info.config.ack_wait !== nanos(ackWaitMs)) {
      await jsm.consumers.update(stream, durable, { ack_wait: nanos(ackWaitMs) })
    }
  }

  return {
    kind: 'nats',

    async publish(message: BusPublish): Promise<void> {
      if (closing || nc.isClosed()) throw new UnavailableError('NATS bus is closed')
      if (!connected) throw new UnavailableError('not connected to NATS (reconnecting)')
      let h: MsgHdrs | undefined
      if (message.headers && Object.keys(message.headers).length > 0) {
        h = natsHeaders()
        for (const [key, value] of Object.entries(message.headers)) h.set(key, value)
      }
      try {
        await js.publish(message.subject, message.data, { msgID: message.messageId, timeout: publishTimeoutMs, headers: h })
      } catch (err) {
        throw new UnavailableError(`publishing ${message.subject} to NATS failed: ${errorText(err)}`)
      }
    },

    async subscribe(subscribeOptions: SubscribeOptions, handler: (message: BusMessage) => Promise<void>): Promise<BusSubscription> {
      if (closing) throw new UnavailableError('NATS bus is closed')
      const { durable, subject } = subscribeOptions
      const stream = streamForFilter(subject)
      const concurrency = Math.max(1, subscribeOptions.concurrency ?? 1)
      const spec = STREAMS.find((s) => s.name === stream)
      if (spec && !owned.includes(stream) && !ensuredForReading.has(stream)) {
        // A consumer may start before the stream's publisher ever ran.
        await ensureStream(jsm, spec, duplicateWindowMs, false, log)
        ensuredForReading.add(stream)
      }
      await ensureConsumer(stream, durable, subject, subscribeOptions.ackWaitMs ?? defaultAckWaitMs)
      const consumer = await js.consumers.get(stream, durable)
      // A small buffer: messages waiting in it already run down their ack wait.
      const messages: ConsumerMessages = await consumer.consume({ max_messages: Math.max(4, 2 * concurrency) })
      const subLog = log.child({ stream, durable })
      let stopping = false
      const inflight = new Set<Promise<void>>()

      const deliver = async (m: JsMsg): Promise<void> => {
        const message = toBusMessage(m)
        try {
          await handler(message)
        } catch (err) {
          subLog.warn({ err, subject: m.subject }, 'event handler failed; message will be redelivered')
          if (!message.settled) message.nak()
        }
      }

      void (async () => {
        for await (const status of await messages.status()) {
          if (
            status.type === ConsumerEvents.ConsumerNotFound ||
            status.type === ConsumerEvents.StreamNotFound ||
            status.type === ConsumerEvents.ConsumerDeleted ||
            status.type === ConsumerEvents.NoResponders
          ) {
            subLog.warn({ status: status.type, data: status.data }, 'consumer cannot pull messages')
          }
        }
      })().catch(() => undefined)

      const loopDone = (async () => {
        try {
          for await (const m of messages) {
            // Pulled before close() but not started: hand it back for another subscriber now.
            if (stopping) {
              m.nak()
              continue
            }
            while (inflight.size >= concurrency) await Promise.race(inflight)
            const run: Promise<void> = deliver(m).finally(() => inflight.delete(run))
            inflight.add(run)
          }
        } catch (err) {
          if (!stopping) subLog.error({ err }, 'consumer stopped unexpectedly')
        }
        await Promise.all([...inflight])
      })()

      subLog.info({ subject, concurrency }, 'subscribed')
      const subscription: BusSubscription = {
        async close() {
          if (stopping) return loopDone
          stopping = true
          subscriptions.delete(subscription)
          await messages.close().catch(() => undefined)
          await loopDone
        },
      }
      subscriptions.add(subscription)
      return subscription
    },

    onReconnect(listener: () => void): () => void {
      reconnectListeners.add(listener)
      return () => void reconnectListeners.delete(listener)
    },

    async health(): Promise<BusComponentHealth> {
      if (closing || nc.isClosed()) return { ok: false, error: 'NATS connection is closed' }
      if (!connected) return { ok: false, error: 'disconnected from NATS; reconnecting' }
      try {
        await healthJsm.getAccountInfo()
        return { ok: true }
      } catch (err) {
        return { ok: false, error: `JetStream not answering: ${errorText(err)}` }
      }
    },

    async close(): Promise<void> {
      if (closing) return
      closing = true
      await Promise.all([...subscriptions].map((s) => s.close()))
      // drain() flushes acks still buffered; an already closed connection just closes.
      await nc.drain().catch(() => nc.close())
      statuses.stop?.()
      await statusDone.catch(() => undefined)
    },
  }
}

/**
 * Creates the stream when missing, or adds our subjects and raises its duplicate window when
 * `owned`; a stream the process only reads is never changed (its NATS user may not).
 */
async function ensureStream(jsm: JetStreamManager, spec: (typeof STREAMS)[number], duplicateWindowMs: number, owned: boolean, log: Logger): Promise<void> {
  const window = nanos(duplicateWindowMs)
  let info: StreamInfo | undefined
  try {
    info = await jsm.streams.info(spec.name)
  } catch (err) {
    if (apiErrorCode(err) !== STREAM_NOT_FOUND) throw err
  }
  if (!info) {
    try {
      await jsm.streams.add({
        name: spec.name,
        subjects: [...spec.subjects],
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        duplicate_window: window,
      })
      log.info({ stream: spec.name, subjects: spec.subjects }, 'stream created')
      return
    } catch (err) {
      // Another process created it in the meantime.
      if (apiErrorCode(err) !== STREAM_NAME_IN_USE) throw err
      info = await jsm.streams.info(spec.name)
    }
  }
  const subjects = new Set(info.config.subjects ?? [])
  const missing = spec.subjects.filter((s) => !subjects.has(s))
  const windowTooShort = (info.config.duplicate_window ?? 0) < window
  if (missing.length === 0 && !windowTooShort) return
  if (!owned) {
    log.warn({ stream: spec.name, missing, duplicateWindowMs }, 'stream lacks our subjects or duplicate window; its publisher updates it')
    return
  }
  await jsm.streams.update(spec.name, {
    subjects: [...subjects, ...missing],
    duplicate_window: windowTooShort ? window : info.config.duplicate_window,
  })
  log.info({ stream: spec.name, added: missing, duplicateWindowMs }, 'stream updated')
}
