/**
 * In-process event bus for the single-process `nodeplane up` (no NATS). It mirrors the JetStream
 * semantics consumers rely on, so the same consumer code behaves the same on both:
 *
 * - durable consumers: state is kept per durable name, shared by all its subscribers (work is
 *   spread between them) and kept across close/re-subscribe within the process; a new durable
 *   first receives the retained messages its filter matches, then new ones ("deliver all");
 * - at least once: a delivery that is neither acked, nak'ed nor termed within the ack wait is
 *   redelivered; `nak(delay)` redelivers after the delay; `term()` drops; `deliveryCount` counts;
 *   a handler that throws before settling is nak'ed;
 * - dedup: a message id seen within the duplicate window is dropped, like `Nats-Msg-Id`.
 *
 * Limits: nothing survives the process (messages, durable positions, dedup ids), and only the
 * newest `maxRetained` messages are kept for durables created later. That is acceptable because
 * the outbox is the durable part: a row is marked published only after this bus accepted it, and
 * this bus lives exactly as long as the consumers that read it. Separate daemons cannot share it;
 * they need NATS (see `openEventBus`).
 */
import type { Logger } from '../log.js'
import { ConflictError, UnavailableError } from '../errors.js'
import type { BusComponentHealth, BusMessage, BusPublish, BusSubscription, EventBus, SubscribeOptions } from './bus.js'
import { assertPublishableSubject, streamForFilter, subjectWithin } from './subjects.js'

export interface LocalBusOptions {
  logger?: Logger
  /** Default ack wait for subscriptions that do not set one. */
  ackWaitMs?: number
  duplicateWindowMs?: number
  /** Messages kept for durables that subscribe later. */
  maxRetained?: number
  /** Clock for the duplicate window, in epoch ms. */
  now?: () => number
}

export interface LocalBus extends EventBus {
  readonly kind: 'local'
  /** Messages of `durable` not yet acked or termed (queued, in flight or waiting after a nak). */
  pending(durable: string): number
}

interface StoredMessage {
  seq: number
  subject: string
  data: Uint8Array
  messageId: string
  headers: Record<string, string>
}

interface Subscriber {
  handler: (message: BusMessage) => Promise<void>
  concurrency: number
  inflight: Set<Promise<void>>
  closed: boolean
}

interface Durable {
  name: string
  filter: string
  ackWaitMs: number
  ready: StoredMessage[]
  /** Delivery counts of messages not yet acked or termed, by sequence. */
  deliveries: Map<number, number>
  /** Delivered and unsettled, or waiting out a nak delay. */
  outstanding: number
  subscribers: Subscriber[]
  nextSubscriber: number
  pumpScheduled: boolean
}

export function createLocalBus(options: LocalBusOptions = {}): LocalBus {
  const defaultAckWaitMs = options.ackWaitMs ?? 30_000
  const duplicateWindowMs = options.duplicateWindowMs ?? 120_000
  const maxRetained = options.maxRetained ?? 10_000
  const now = options.now ?? Date.now
  const log = options.logger?.child({ component: 'local-bus' })

  const retained: StoredMessage[] = []
  /** message id -> expiry (epoch ms); insertion order is expiry order. */
  const seen = new Map<string, number>()
  const durables = new Map<string, Durable>()
  const timers = new Set<NodeJS.Timeout>()
  let seq = 0
  let closed = false

  function after(ms: number, fn: () => void): NodeJS.Timeout {
    const timer = setTimeout(() => {
      timers.delete(timer)
      if (!closed) fn()
    }, ms)
    timer.unref()
    timers.add(timer)
    return timer
  }

  function cancel(timer: NodeJS.Timeout): void {
    clearTimeout(timer)
    timers.delete(timer)
  }

  function schedulePump(durable: Durable): void {
    if (durable.pumpScheduled) return
    durable.pumpScheduled = true
    queueMicrotask(() => {
      durable.pumpScheduled = false
      pump(durable)
    })
  }

  function requeue(durable: Durable, message: StoredMessage): void {
    durable.outstanding--
    durable.ready.push(message)
    schedulePump(durable)
  }

  function pickSubscriber(durable: Durable): Subscriber | undefined {
    const subs = durable.subscribers
    for (let i = 0; i < subs.length; i++) {
      const index = (durable.nextSubscriber + i) % subs.length
      const sub = subs[index] as Subscriber
      if (!sub.closed && sub.inflight.size < sub.concurrency) {
        durable.nextSubscriber = (index + 1) % subs.length
        return sub
      }
    }
    return undefined
  }

  function pump(durable: Durable): void {
    while (!closed && durable.ready.length > 0) {
      const sub = pickSubscriber(durable)
      if (!sub) return
      deliver(durable, sub, durable.ready.shift() as StoredMessage)
    }
  }

  function deliver(durable: Durable, sub: Subscriber, stored: StoredMessage): void {
    const deliveryCount = (durable.deliveries.get(stored.seq) ?? 0) + 1
    durable.deliveries.set(stored.seq, deliveryCount)
    durable.outstanding++
    let settled = false
    const ackTimer = after(durable.ackWaitMs, () => {
      if (settled) return
      settled = true
      requeue(durable, stored)
    })
    const settle = (): boolean => {
      if (settled) return false
      settled = true
      cancel(ackTimer)
      return true
    }
    const message: BusMessage = {
      subject: stored.subject,
      data: stored.data,
      messageId: stored.messageId || undefined,
      headers: { ...stored.headers },
      deliveryCount,
      ack() {
        if (!settle()) return
        durable.outstanding--
        durable.deliveries.delete(stored.seq)
      },
      nak(delayMs?: number) {
        if (!settle()) return
        if (delayMs && delayMs > 0) after(delayMs, () => requeue(durable, stored))
        else requeue(durable, stored)
      },
      term() {
        if (!settle()) return
        durable.outstanding--
        durable.deliveries.delete(stored.seq)
      },
    }
    const run = (async () => {
      try {
        await sub.handler(message)
      } catch (err) {
        log?.warn({ err, durable: durable.name, subject: stored.subject }, 'event handler failed; message will be redelivered')
        message.nak()
      }
    })()
    const tracked = run.finally(() => {
      sub.inflight.delete(tracked)
      schedulePump(durable)
    })
    sub.inflight.add(tracked)
  }

  function forgetExpiredIds(at: number): void {
    for (const [id, expiresAt] of seen) {
      if (expiresAt > at) return
      seen.delete(id)
    }
  }

  async function closeSubscriber(durable: Durable, sub: Subscriber): Promise<void> {
    if (sub.closed) return
    sub.closed = true
    durable.subscribers = durable.subscribers.filter((s) => s !== sub)
    durable.nextSubscriber = 0
    await Promise.all([...sub.inflight])
  }

  return {
    kind: 'local',

    async publish(input: BusPublish): Promise<void> {
      if (closed) throw new UnavailableError('event bus is closed')
      assertPublishableSubject(input.subject)
      const at = now()
      forgetExpiredIds(at)
      if (input.messageId) {
        if (seen.has(input.messageId)) return
        seen.set(input.messageId, at + duplicateWindowMs)
      }
      const stored: StoredMessage = {
        seq: ++seq,
        subject: input.subject,
        data: input.data,
        messageId: input.messageId,
        headers: { ...(input.headers ?? {}) },
      }
      retained.push(stored)
      if (retained.length > maxRetained) retained.shift()
      for (const durable of durables.values()) {
        if (subjectWithin(stored.subject, durable.filter)) {
          durable.ready.push(stored)
          schedulePump(durable)
        }
      }
    },

    async subscribe(options: SubscribeOptions, handler: (message: BusMessage) => Promise<void>): Promise<BusSubscription> {
      if (closed) throw new UnavailableError('event bus is closed')
      streamForFilter(options.subject)
      let durable = durables.get(options.durable)
      if (!durable) {
        durable = {
          name: options.durable,
          filter: options.subject,
          ackWaitMs: defaultAckWaitMs,
          ready: retained.filter((m) => subjectWithin(m.subject, options.subject)),
          deliveries: new Map(),
          outstanding: 0,
          subscribers: [],
          nextSubscriber: 0,
          pumpScheduled: false,
        }
        durables.set(options.durable, durable)
      } else if (durable.filter !== options.subject) {
        throw new ConflictError(
          `durable consumer ${options.durable} already reads ${durable.filter}, not ${options.subject}`,
        )
      }
      durable.ackWaitMs = options.ackWaitMs ?? defaultAckWaitMs
      const sub: Subscriber = { handler, concurrency: Math.max(1, options.concurrency ?? 1), inflight: new Set(), closed: false }
      durable.subscribers.push(sub)
      schedulePump(durable)
      const owner = durable
      return { close: () => closeSubscriber(owner, sub) }
    },

    // In-process: there is no connection to lose.
    onReconnect: () => () => undefined,

    async health(): Promise<BusComponentHealth> {
      return closed ? { ok: false, error: 'event bus is closed' } : { ok: true }
    },

    async close(): Promise<void> {
      if (closed) return
      const closing = [...durables.values()].flatMap((d) => d.subscribers.map((s) => closeSubscriber(d, s)))
      await Promise.all(closing)
      closed = true
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
    },

    pending(name: string): number {
      const durable = durables.get(name)
      return durable ? durable.ready.length + durable.outstanding : 0
    },
  }
}
