/**
 * The event bus seen by the rest of the code. Two adapters implement it: NATS JetStream
 * (`nats-bus.ts`, whenever `NATS_URL` is set) and an in-process bus (`local-bus.ts`) for the
 * single-process `nodeplane up`. Publishing is done only by the outbox relay; domain code writes
 * outbox rows in its own transaction instead.
 */

export interface BusPublish {
  subject: string
  /** JSON payload bytes. */
  data: Uint8Array
  /** Deduplication id: the same id published twice is stored once (JetStream Nats-Msg-Id). */
  messageId: string
  headers?: Record<string, string>
}

export interface BusMessage {
  subject: string
  data: Uint8Array
  messageId: string | undefined
  headers: Record<string, string>
  /** 1 on first delivery, 2+ on redelivery. */
  deliveryCount: number
  ack(): void
  /** Redeliver, after `delayMs` when given. */
  nak(delayMs?: number): void
  /** Never redeliver. */
  term(): void
}

export interface SubscribeOptions {
  /** Durable consumer name, e.g. `main-app-payment`: survives restarts, shared by replicas. */
  durable: string
  /** Subject filter, e.g. `payment.*` or `events.node.>`. */
  subject: string
  /** Redelivery if neither ack nor nak arrives within this time. */
  ackWaitMs?: number
  /** Messages handled concurrently by this subscriber. */
  concurrency?: number
}

export interface BusSubscription {
  /** Stop receiving; in-flight handlers finish first. */
  close(): Promise<void>
}

export type BusComponentHealth = { ok: true } | { ok: false; error: string }

export interface EventBus {
  readonly kind: 'nats' | 'local'
  publish(message: BusPublish): Promise<void>
  subscribe(options: SubscribeOptions, handler: (message: BusMessage) => Promise<void>): Promise<BusSubscription>
  /** Readiness probe for `/readyz`. */
  health(): Promise<BusComponentHealth>
  /**
   * Calls `listener` each time the connection to the bus is back after a loss (a bus that
   * cannot lose its connection never calls it); returns the unsubscribe function.
   */
  onReconnect(listener: () => void): () => void
  close(): Promise<void>
}

/** Streams and the subjects they hold (ARCHITECTURE.md; payment service spec "Events"). */
export const STREAMS = [
  { name: 'PAYMENTS', subjects: ['payment.*'] },
  { name: 'EVENTS', subjects: ['events.>'] },
] as const
