/**
 * The NATS JetStream adapter against a real nats-server: streams, durable consumers and the
 * delivery rules the consumer helper relies on.
 */
import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { nanos, StorageType } from 'nats'
import { ConflictError, UnavailableError } from '../../../src/errors.js'
import type { BusMessage, EventBus } from '../../../src/events/bus.js'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { waitFor } from '../../helpers/ports.js'
import { openProbe, silentLogger, uniqueSubjectPrefix, type JetStreamProbe } from './support.js'

let nats: NatsServer
let bus: EventBus
let probe: JetStreamProbe
const enc = (s: string) => new TextEncoder().encode(s)

beforeAll(async () => {
  nats = await startNats()
  bus = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'nats-bus-test' })
  probe = await openProbe(nats.url)
})

afterAll(async () => {
  await bus?.close()
  await probe?.close()
  await nats?.destroy()
})

describe('NATS bus', () => {
  it('creates the streams on file storage with a duplicate window of at least two minutes', async () => {
    for (const [name, subjects] of [
      ['PAYMENTS', ['payment.*']],
      ['EVENTS', ['events.>']],
    ] as const) {
      const info = await probe.jsm.streams.info(name)
      expect(info.config.subjects).toEqual(subjects)
      expect(info.config.storage).toBe(StorageType.File)
      expect(info.config.duplicate_window).toBeGreaterThanOrEqual(nanos(120_000))
    }
  })

  it('raises a too short duplicate window and keeps limits an operator set', async () => {
    await probe.jsm.streams.update('PAYMENTS', { duplicate_window: nanos(30_000), max_age: nanos(86_400_000) })
    const again = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'second' })
    await again.close()
    const info = await probe.jsm.streams.info('PAYMENTS')
    expect(info.config.duplicate_window).toBeGreaterThanOrEqual(nanos(120_000))
    expect(info.config.max_age).toBe(nanos(86_400_000))
  })

  it('stores a message id once and acknowledges both publishes', async () => {
    const subject = `${uniqueSubjectPrefix()}.x`
    const messageId = crypto.randomUUID()
    await bus.publish({ subject, data: enc('{"n":1}'), messageId })
    await bus.publish({ subject, data: enc('{"n":1}'), messageId })
    expect(await probe.stored(subject)).toBe(1)
  })

  it('redelivers what a handler fails on, drops what it terms, with delivery counts', async () => {
    const prefix = uniqueSubjectPrefix()
    const durable = `d-${prefix.split('.').pop()}`
    const deliveries: Array<[string, number]> = []
    const sub = await bus.subscribe({ durable, subject: `${prefix}.>` }, async (m: BusMessage) => {
      const body = new TextDecoder().decode(m.data)
      deliveries.push([body, m.deliveryCount])
      if (body === 'poison') return m.term()
      if (body === 'flaky' && m.deliveryCount === 1) throw new Error('transient')
      if (body === 'later' && m.deliveryCount === 1) return m.nak(50)
      m.ack()
    })
    try {
      for (const body of ['poison', 'flaky', 'later']) {
        await bus.publish({ subject: `${prefix}.${body}`, data: enc(body), messageId: crypto.randomUUID() })
      }
      await waitFor(async () => {
        const info = await probe.jsm.consumers.info('EVENTS', durable)
        return info.num_pending + info.num_ack_pending === 0 && deliveries.length === 5
      }, 'all messages settled')
      expect(deliveries.filter(([b]) => b === 'poison')).toEqual([['poison', 1]])
      expect(deliveries.filter(([b]) => b === 'flaky')).toEqual([['flaky', 1], ['flaky', 2]])
      expect(deliveries.filter(([b]) => b === 'later')).toEqual([['later', 1], ['later', 2]])
    } finally {
      await sub.close()
    }
  })

  it('resumes a durable where it stopped: messages published while nobody listened arrive later', async () => {
    const prefix = uniqueSubjectPrefix()
    const durable = `d-${prefix.split('.').pop()}`
    const got: string[] = []
    const handler = async (m: BusMessage) => {
      got.push(new TextDecoder().decode(m.data))
      m.ack()
    }
    const first = await bus.subscribe({ durable, subject: `${prefix}.*` }, handler)
    await bus.publish({ subject: `${prefix}.a`, data: enc('a'), messageId: crypto.randomUUID() })
    await waitFor(async () => got.length === 1, 'the first message')
    await first.close()
    await bus.publish({ subject: `${prefix}.b`, data: enc('b'), messageId: crypto.randomUUID() })
    const second = await bus.subscribe({ durable, subject: `${prefix}.*` }, handler)
    try {
      await waitFor(async () => got.length === 2, 'the message published while closed')
      expect(got).toEqual(['a', 'b'])
    } finally {
      await second.close()
    }
  })

  it('refuses a durable name already used with another filter', async () => {
    const prefix = uniqueSubjectPrefix()
    const durable = `d-${prefix.split('.').pop()}`
    const sub = await bus.subscribe({ durable, subject: `${prefix}.a` }, async (m) => m.ack())
    await sub.close()
    await expect(bus.subscribe({ durable, subject: `${prefix}.b` }, async (m) => m.ack())).rejects.toThrow(ConflictError)
  })

  it('reports health and refuses to publish once closed', async () => {
    const other = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'short-lived' })
    expect(await other.health()).toEqual({ ok: true })
    await other.close()
    expect((await other.health()).ok).toBe(false)
    await expect(other.publish({ subject: 'payment.completed', data: enc('{}'), messageId: crypto.randomUUID() })).rejects.toThrow(
      UnavailableError,
    )
  })
})
