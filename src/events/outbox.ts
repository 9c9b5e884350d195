/**
 * The transactional outbox (ARCHITECTURE.md, "Transactional outbox"). Domain code writes the
 * event as a row in the same transaction as the state change that causes it; the relay
 * (`relay.ts`) publishes committed rows. A rolled-back change therefore publishes nothing, and a
 * committed one cannot be lost while the bus is down.
 */
import type { Knex } from 'knex'
import { fromJson, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { ValidationError } from '../errors.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import { isEventPayload, type EventPayload } from './envelope.js'
import { assertPublishableSubject } from './subjects.js'

export interface OutboxEvent {
  /** Concrete subject held by a stream, e.g. `payment.completed`, `events.rollout.{id}.started`. */
  subject: string
  /** A JSON object; consumers receive exactly this. */
  payload: EventPayload
  /** UUID; defaults to a random one. Becomes the JetStream dedup id and the consumers' key. */
  messageId?: string
  headers?: Record<string, string>
}

export interface OutboxRow {
  id: number
  messageId: string
  subject: string
  payload: EventPayload
  headers: Record<string, string>
  createdAt: Date
  publishedAt: Date | null
  claimedBy: string | null
  claimedUntil: Date | null
  attempts: number
  lastError: string | null
}

/**
 * NATS refuses messages above its max_payload (1 MiB by default). A row that can never be
 * published would be retried forever, so it is refused while the producer can still react.
 */
export const MAX_EVENT_PAYLOAD_BYTES = 1_000_000

/** SQLite binds at most 32766 variables per statement; 7 columns per row. */
const INSERT_CHUNK = 500

function outboxInsert(event: OutboxEvent, now: Date): Record<string, unknown> {
  assertPublishableSubject(event.subject)
  if (!isEventPayload(event.payload)) throw new ValidationError(`event payload for ${event.subject} must be a JSON object`)
  const messageId = event.messageId ?? uuidv7(now.getTime())
  if (!isUuid(messageId)) throw new ValidationError(`event message id "${messageId}" is not a UUID`)
  const payload = toJson(event.payload)
  if (Buffer.byteLength(payload) > MAX_EVENT_PAYLOAD_BYTES) {
    throw new ValidationError(`event payload for ${event.subject} is larger than ${MAX_EVENT_PAYLOAD_BYTES} bytes`)
  }
  const headers = event.headers && Object.keys(event.headers).length > 0 ? event.headers : null
  if (headers && Object.values(headers).some((v) => typeof v !== 'string')) {
    throw new ValidationError(`event headers for ${event.subject} must be strings`)
  }
  return {
    message_id: messageId.toLowerCase(),
    subject: event.subject,
    payload,
    headers: headers ? toJson(headers) : null,
    created_at: now,
    attempts: 0,
  }
}

/**
 * Inserts one outbox row through `trx` (pass the transaction of the state change). Returns the
 * message id. Throws ValidationError for a subject no stream holds, a non-object payload or a
 * message id that is not a UUID.
 */
export async function enqueueEvent(trx: Queryable, event: OutboxEvent, now: Date = new Date()): Promise<string> {
  const [messageId] = await enqueueEvents(trx, [event], now)
  return messageId as string
}

/** Inserts several outbox rows (in order) through `trx`; returns their message ids. */
export async function enqueueEvents(trx: Queryable, events: readonly OutboxEvent[], now: Date = new Date()): Promise<string[]> {
  const rows = events.map((e) => outboxInsert(e, now))
  for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
    await trx('outbox').insert(rows.slice(i, i + INSERT_CHUNK))
  }
  if (rows.length > 0) wakeAfterCommit(trx)
  return rows.map((r) => r.message_id as string)
}

export function toOutboxRow(raw: Record<string, unknown>): OutboxRow {
  return {
    id: Number(raw.id),
    messageId: String(raw.message_id),
    subject: String(raw.subject),
    payload: fromJson<EventPayload>(raw.payload),
    headers: raw.headers === null || raw.headers === undefined ? {} : fromJson<Record<string, string>>(raw.headers),
    createdAt: toDate(raw.created_at),
    publishedAt: toDateOrNull(raw.published_at),
    claimedBy: (raw.claimed_by as string | null) ?? null,
    claimedUntil: toDateOrNull(raw.claimed_until),
    attempts: Number(raw.attempts),
    lastError: (raw.last_error as string | null) ?? null,
  }
}

/** Rows not yet published (the relay's backlog), for metrics and readiness. */
export async function countUnpublished(db: Queryable): Promise<number> {
  const row = (await db('outbox').whereNull('published_at').count({ n: '*' }).first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}

// In-process wake-up: a relay in this process publishes a new row right after its commit
// instead of at its next poll. Rows written by other processes are found by polling.
type CommitListener = () => void
const commitListeners = new Set<CommitListener>()
const notified = new WeakSet<object>()

/** Calls `listener` after each commit that wrote outbox rows in this process; returns an unsubscribe. */
export function onOutboxCommit(listener: CommitListener): () => void {
  commitListeners.add(listener)
  return () => commitListeners.delete(listener)
}

/**
 * Wakes this process's relay now. For a writer whose outbox rows were written in a savepoint:
 * the savepoint's release, not the commit, is what `wakeAfterCommit` saw, so the writer calls
 * this after its own commit.
 */
export function notifyCommitted(): void {
  for (const listener of commitListeners) listener()
}

function wakeAfterCommit(db: Queryable): void {
  if (commitListeners.size === 0) return
  const trx = db as Partial<Knex.Transaction>
  if (trx.executionPromise instanceof Promise) {
    if (notified.has(trx)) return
    notified.add(trx)
    // Resolves on commit (rejects on rollback: nothing to publish then).
    trx.executionPromise.then(notifyCommitted, () => undefined)
  } else {
    queueMicrotask(notifyCommitted)
  }
}
