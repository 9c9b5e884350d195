/**
 * The one definition of what travels on the bus (docs/events.md, "Envelope").
 *
 * - body: the event payload as UTF-8 JSON, always a JSON object; the bytes are exactly what the
 *   producer passed to `enqueueEvent` (after a round trip through the outbox's json column);
 * - message id: the outbox row's `message_id` (a UUID), sent as JetStream's `Nats-Msg-Id`, so a
 *   republished row is stored once, and used by consumers as the idempotency key;
 * - headers: the outbox row's optional string headers.
 *
 * A message from a producer that sets no message id (one outside this codebase) may carry the
 * key in the payload field `idempotency_key` instead.
 */
import type { BusMessage } from './bus.js'

export type EventPayload = Record<string, unknown>

/** Payload field carrying the idempotency key when the message has no message id. */
export const IDEMPOTENCY_KEY_FIELD = 'idempotency_key'

/** Longest key accepted; the stored key (`idempotency:{consumer}:{key}`) must fit 300 chars. */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 180

export interface EventEnvelope {
  subject: string
  messageId: string | undefined
  /** Message id, else the payload's `idempotency_key`. */
  idempotencyKey: string
  headers: Record<string, string>
  payload: EventPayload
  deliveryCount: number
}

export type OpenedEnvelope = { ok: true; envelope: EventEnvelope } | { ok: false; reason: string }

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })

export function isEventPayload(value: unknown): value is EventPayload {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

export function encodePayload(payload: EventPayload): Uint8Array {
  return encoder.encode(JSON.stringify(payload))
}

/**
 * Parses a delivered message. `ok: false` means malformed: it can never be understood, whatever
 * the consumer's version (not UTF-8 JSON, not an object, or no idempotency key at all).
 */
export function openEnvelope(message: BusMessage): OpenedEnvelope {
  let payload: unknown
  try {
    payload = JSON.parse(decoder.decode(message.data))
  } catch {
    return { ok: false, reason: 'body is not UTF-8 JSON' }
  }
  if (!isEventPayload(payload)) return { ok: false, reason: 'body is not a JSON object' }
  const fromPayload = payload[IDEMPOTENCY_KEY_FIELD]
  const key = message.messageId || (typeof fromPayload === 'string' ? fromPayload : '')
  if (key.length === 0) return { ok: false, reason: `no message id and no ${IDEMPOTENCY_KEY_FIELD} field` }
  if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
    return { ok: false, reason: `idempotency key longer than ${MAX_IDEMPOTENCY_KEY_LENGTH} characters` }
  }
  return {
    ok: true,
    envelope: {
      subject: message.subject,
      messageId: message.messageId || undefined,
      idempotencyKey: key,
      headers: message.headers,
      payload,
      deliveryCount: message.deliveryCount,
    },
  }
}
