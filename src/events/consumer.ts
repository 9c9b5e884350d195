/**
 * Durable event consumers with the spec's consumer table (payment service spec, "Events"):
 *
 * | situation                              | action                                   |
 * |----------------------------------------|------------------------------------------|
 * | already processed                      | ack and skip                             |
 * | malformed (cannot be parsed at all)    | ack (log a warning): retrying cannot help |
 * | unmarshal failure (`decode` throws)    | nak with back-off (redelivered)          |
 * | confirmation cannot be had (`confirm`) | nak with back-off                        |
 * | handler failure                        | roll back, nak with back-off             |
 *
 * The idempotency key is marked processed in the same database transaction as the handler's
 * writes, so they commit together or not at all; the message is acked only after the commit.
 * A crash between commit and ack leads to a redelivery, which the stored key turns into a skip.
 */
import type { Db, Tx } from '../db/knex.js'
import { ValidationError } from '../errors.js'
import type { Logger } from '../log.js'
import type { BusMessage, BusSubscription, EventBus } from './bus.js'
import { openEnvelope, type EventEnvelope, type EventPayload } from './envelope.js'
import { AlreadyProcessedError, isProcessed, markProcessed } from './idempotency.js'

export type ConsumerOutcome = 'processed' | 'duplicate' | 'malformed' | 'undecodable' | 'failed'

export interface ConsumerOutcomeInfo {
  subject: string
  messageId: string | undefined
  deliveryCount: number
  error?: unknown
}

export interface ConsumerOptions<T> {
  bus: EventBus
  /** The consumer's own database: the handler's writes and the idempotency keys live there. */
  db: Db
  logger: Logger
  /** Durable consumer name, e.g. `main-app-payment`. */
  durable: string
  /** Subject filter, e.g. `payment.*`. */
  subject: string
  /** Lifetime of idempotency keys (IDEMPOTENCY_KEY_TTL, 7 days by default). */
  ttlMs: number
  /** Typed unmarshal of the payload (e.g. `schema.parse`); throwing means "not understood yet". */
  decode: (payload: EventPayload, envelope: EventEnvelope) => T | Promise<T>
  /**
   * A check against another service before the transaction (no database lock is held while it
   * waits), e.g. the payment consumer's GetPayment. It returns the event, possibly annotated
   * with its verdict for `handle`; throwing means "cannot tell now" and redelivers with back-off.
   * Skipped for a message already processed.
   */
  confirm?: (event: T, envelope: EventEnvelope) => Promise<T>
  /** The effect. Write only through `trx`; throwing rolls everything back and redelivers. */
  handle: (trx: Tx, event: T, envelope: EventEnvelope) => Promise<void>
  now?: () => Date
  ackWaitMs?: number
  concurrency?: number
  /** Delay before a nak'ed message comes back, by delivery count (1 = first delivery). */
  retryDelayMs?: (deliveryCount: number) => number
  /** Metrics hook, called once per delivery. */
  onOutcome?: (outcome: ConsumerOutcome, info: ConsumerOutcomeInfo) => void
}

/** 1 s, 2 s, 4 s … capped at one minute. */
export function defaultRetryDelayMs(deliveryCount: number): number {
  return Math.min(60_000, 1_000 * 2 ** Math.min(Math.max(deliveryCount - 1, 0), 10))
}

/**
 * The per-message procedure, without the subscription: exported for callers that drive a bus
 * themselves. Settles the message (ack or nak) and returns what happened.
 */
export function createEventHandler<T>(options: ConsumerOptions<T>): (message: BusMessage) => Promise<ConsumerOutcome> {
  const { db, durable, ttlMs, decode, handle } = options
  const now = options.now ?? (() => new Date())
  const retryDelayMs = options.retryDelayMs ?? defaultRetryDelayMs
  const consumerLog = options.logger.child({ consumer: durable })

  return async (message) => {
    const log = consumerLog.child({ subject: message.subject, messageId: message.messageId, deliveryCount: message.deliveryCount })
    const info: ConsumerOutcomeInfo = { subject: message.subject, messageId: message.messageId, deliveryCount: message.deliveryCount }
    const settle = (outcome: ConsumerOutcome, error?: unknown): ConsumerOutcome => {
      try {
        if (outcome === 'undecodable' || outcome === 'failed') message.nak(retryDelayMs(message.deliveryCount))
        else message.ack()
      } catch (err) {
        // The bus will redeliver; the idempotency key makes that harmless.
        log.warn({ err }, 'could not settle message with the bus')
      }
      options.onOutcome?.(outcome, error === undefined ? info : { ...info, error })
      return outcome
    }

    const opened = openEnvelope(message)
    if (!opened.ok) {
      log.warn({ reason: opened.reason }, 'malformed event acknowledged and dropped')
      return settle('malformed')
    }
    const envelope = opened.envelope

    let event: T
    try {
      event = await decode(envelope.payload, envelope)
    } catch (err) {
      log.warn({ err }, 'event payload not understood; redelivering (a newer producer? upgrade this consumer)')
      return settle('undecodable', err)
    }

    // Scoped by consumer: two consumers of one message in one database each process it once.
    const key = `${durable}:${envelope.idempotencyKey}`
    if (options.confirm) {
      try {
        // A redelivery may be of an event already processed: skipped before asking anyone. A first
        // delivery almost never is (the bus drops a republished id within its duplicate window),
        // so it saves the read; the transaction's key still refuses one that was.
        if (message.deliveryCount > 1 && (await isProcessed(db, key, now()))) {
          log.info('event already processed; acknowledged and skipped')
          return settle('duplicate')
        }
        event = await options.confirm(event, envelope)
      } catch (err) {
        log.warn({ err }, 'event could not be confirmed now; redelivering')
        return settle('failed', err)
      }
    }
    try {
      await db.transaction(async (trx) => {
        // Marked before the handler runs, and refused (AlreadyProcessedError, rolling back) when
        // the key is live: on Postgres a concurrent delivery of the same key waits here for this
        // transaction instead of running the handler in parallel.
        await markProcessed(trx, key, durable, ttlMs, now())
        await handle(trx, event, envelope)
      })
      log.debug('event processed')
      return settle('processed')
    } catch (err) {
      if (err instanceof AlreadyProcessedError) {
        log.info('event already processed; acknowledged and skipped')
        return settle('duplicate')
      }
      log.warn({ err }, 'event handler failed; rolled back, redelivering')
      return settle('failed', err)
    }
  }
}

/** NATS durable names exclude dots, spaces and wildcards; 100 fits `idempotency_keys.consumer`. */
const DURABLE_NAME = /^[A-Za-z0-9_-]{1,100}$/

/** Subscribes a durable consumer that applies the consumer table to every message. */
export async function runConsumer<T>(options: ConsumerOptions<T>): Promise<BusSubscription> {
  if (!DURABLE_NAME.test(options.durable)) {
    throw new ValidationError(`durable consumer name "${options.durable}" must be 1-100 letters, digits, - or _`)
  }
  if (!(options.ttlMs > 0)) throw new ValidationError(`idempotency lifetime must be positive, got ${options.ttlMs} ms`)
  const handler = createEventHandler(options)
  return options.bus.subscribe(
    { durable: options.durable, subject: options.subject, ackWaitMs: options.ackWaitMs, concurrency: options.concurrency },
    async (message) => {
      await handler(message)
    },
  )
}
