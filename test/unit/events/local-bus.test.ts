/**
 * The in-process bus's at-least-once rules, with fake timers: time is moved, never waited for.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { ConflictError, ValidationError } from '../../../src/errors.js'
import type { BusMessage } from '../../../src/events/bus.js'
import { createLocalBus, type LocalBus } from '../../../src/events/local-bus.js'

const enc = (s: string) => new TextEncoder().encode(s)
const dec = (b: Uint8Array) => new TextDecoder().decode(b)
const flush = () => vi.advanceTimersByTimeAsync(0)

describe('local bus', () => {
  let bus: LocalBus
  let id = 0
  const publish = (subject: string, body: string, messageId = `m-${++id}`) => bus.publish({ subject, data: enc(body), messageId })

  beforeEach(() => {
    vi.useFakeTimers()
    bus = createLocalBus({ ackWaitMs: 30_000, duplicateWindowMs: 120_000 })
  })
  afterEach(async () => {
    await bus.close()
    vi.useRealTimers()
  })

  it('delivers retained messages to a new durable, then new ones, filtered by subject', async () => {
    await publish('payment.completed', 'a')
    await publish('events.node.n1.upgrade_started', 'x')
    const seen: string[] = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, async (m) => {
      seen.push(dec(m.data))
      m.ack()
    })
    await publish('payment.failed', 'b')
    await flush()
    expect(seen).toEqual(['a', 'b'])
    expect(bus.pending('d')).toBe(0)
  })

  it('redelivers a message nobody settles once the ack wait passes', async () => {
    const deliveries: number[] = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*', ackWaitMs: 10_000 }, async (m) => {
      deliveries.push(m.deliveryCount)
      if (m.deliveryCount === 2) m.ack()
    })
    await publish('payment.completed', 'a')
    await flush()
    expect(deliveries).toEqual([1])
    await vi.advanceTimersByTimeAsync(9_999)
    expect(deliveries).toEqual([1])
    await vi.advanceTimersByTimeAsync(1)
    expect(deliveries).toEqual([1, 2])
    await vi.advanceTimersByTimeAsync(60_000)
    expect(deliveries).toEqual([1, 2])
    expect(bus.pending('d')).toBe(0)
  })

  it('redelivers after the nak delay, and a term drops the message', async () => {
    const deliveries: Array<[string, number]> = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, async (m) => {
      const body = dec(m.data)
      deliveries.push([body, m.deliveryCount])
      if (body === 'retry' && m.deliveryCount === 1) m.nak(5_000)
      else if (body === 'poison') m.term()
      else m.ack()
    })
    await publish('payment.completed', 'retry')
    await publish('payment.completed', 'poison')
    await flush()
    expect(deliveries).toEqual([['retry', 1], ['poison', 1]])
    expect(bus.pending('d')).toBe(1)
    await vi.advanceTimersByTimeAsync(4_999)
    expect(deliveries).toHaveLength(2)
    await vi.advanceTimersByTimeAsync(1)
    expect(deliveries).toEqual([['retry', 1], ['poison', 1], ['retry', 2]])
    await vi.advanceTimersByTimeAsync(120_000)
    expect(deliveries).toHaveLength(3)
    expect(bus.pending('d')).toBe(0)
  })

  it('redelivers at once when the handler throws before settling', async () => {
    const deliveries: number[] = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, async (m) => {
      deliveries.push(m.deliveryCount)
      if (m.deliveryCount === 1) throw new Error('boom')
      m.ack()
    })
    await publish('payment.completed', 'a')
    await flush()
    await flush()
    expect(deliveries).toEqual([1, 2])
  })

  it('stores a message id once within the duplicate window', async () => {
    const seen: string[] = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, async (m) => {
      seen.push(dec(m.data))
      m.ack()
    })
    await publish('payment.completed', 'first', 'same-id')
    await publish('payment.completed', 'again', 'same-id')
    await flush()
    expect(seen).toEqual(['first'])
    await vi.advanceTimersByTimeAsync(120_001)
    await publish('payment.completed', 'later', 'same-id')
    await flush()
    expect(seen).toEqual(['first', 'later'])
  })

  it('shares a durable between subscribers and keeps its position across re-subscribe', async () => {
    const byA: string[] = []
    const byB: string[] = []
    const handler = (into: string[]) => async (m: BusMessage) => {
      into.push(dec(m.data))
      m.ack()
    }
    const a = await bus.subscribe({ durable: 'd', subject: 'payment.*' }, handler(byA))
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, handler(byB))
    for (const body of ['1', '2', '3', '4']) await publish('payment.completed', body)
    await flush()
    expect([...byA, ...byB].sort()).toEqual(['1', '2', '3', '4'])
    expect(byA.length).toBeGreaterThan(0)
    expect(byB.length).toBeGreaterThan(0)

    await a.close()
    await publish('payment.completed', '5')
    await flush()
    expect(byB).toContain('5')
    expect(byA).not.toContain('5')
  })

  it('keeps at most `concurrency` handlers running per subscriber', async () => {
    let running = 0
    let peak = 0
    const release: Array<() => void> = []
    await bus.subscribe({ durable: 'd', subject: 'payment.*', concurrency: 2 }, async (m) => {
      running++
      peak = Math.max(peak, running)
      await new Promise<void>((r) => release.push(r))
      running--
      m.ack()
    })
    for (const body of ['1', '2', '3', '4']) await publish('payment.completed', body)
    await flush()
    expect(running).toBe(2)
    while (release.length > 0) {
      release.shift()?.()
      await flush()
    }
    await flush()
    expect(peak).toBe(2)
    expect(bus.pending('d')).toBe(0)
  })

  it('refuses subjects no stream holds and a durable re-used with another filter', async () => {
    await expect(publish('orders.created', 'x')).rejects.toThrow(ValidationError)
    await bus.subscribe({ durable: 'd', subject: 'payment.*' }, async (m) => m.ack())
    await expect(bus.subscribe({ durable: 'd', subject: 'events.>' }, async (m) => m.ack())).rejects.toThrow(ConflictError)
  })
})
