/**
 * The outbox guarantees against a real nats-server, on both databases: nothing is published for
 * a rolled-back change, and each committed event is stored in the stream exactly once, even
 * when a relay dies between publishing and marking, or NATS is down for a while.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import type { BusPublish, EventBus } from '../../../src/events/bus.js'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { countUnpublished, enqueueEvent, enqueueEvents } from '../../../src/events/outbox.js'
import { OutboxRelay, purgePublished } from '../../../src/events/relay.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { waitFor } from '../../helpers/ports.js'
import { openProbe, outboxRows, silentLogger, uniqueSubjectPrefix, type JetStreamProbe } from './support.js'

let nats: NatsServer
let bus: EventBus
let probe: JetStreamProbe

beforeAll(async () => {
  nats = await startNats()
  bus = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'outbox-relay-test', reconnectTimeWaitMs: 100, publishTimeoutMs: 2_000 })
  probe = await openProbe(nats.url)
})

afterAll(async () => {
  await bus?.close()
  await probe?.close()
  await nats?.destroy()
})

describe.each(DIALECTS)('outbox and relay on %s', (dialect) => {
  let t: TestDatabase
  let prefix: string
  const relays: OutboxRelay[] = []
  const relay = (options: Partial<ConstructorParameters<typeof OutboxRelay>[0]> = {}) => {
    const r = new OutboxRelay({ db: t.db, bus, logger: silentLogger, wakeOnCommit: false, ...options })
    relays.push(r)
    return r
  }

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    prefix = uniqueSubjectPrefix()
  })
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((r) => r.stop()))
    await t.destroy()
  })

  it('publishes nothing for a rolled-back transaction and each committed event once', async () => {
    await expect(
      t.db.transaction(async (trx) => {
        await enqueueEvent(trx, { subject: `${prefix}.rolled_back`, payload: { n: 0 } })
        throw new Error('the state change failed')
      }),
    ).rejects.toThrow('the state change failed')

    const ids = await t.db.transaction((trx) =>
      enqueueEvents(trx, [1, 2, 3].map((n) => ({ subject: `${prefix}.created`, payload: { n }, headers: { 'Nodeplane-Kind': 'test' } }))),
    )
    const r = relay()
    expect(await r.runOnce()).toBe(3)
    expect(await r.runOnce()).toBe(0)

    expect(await probe.stored(`${prefix}.created`)).toBe(3)
    expect(await probe.stored(`${prefix}.rolled_back`)).toBe(0)
    expect(await countUnpublished(t.db)).toBe(0)

    // What consumers receive: the payload as JSON, the outbox message id as Nats-Msg-Id.
    const last = await probe.jsm.streams.getMessage('EVENTS', { last_by_subj: `${prefix}.created` })
    expect(last.json()).toEqual({ n: 3 })
    expect(last.header.get('Nats-Msg-Id')).toBe(ids[2])
    expect(last.header.get('Nodeplane-Kind')).toBe('test')
  })

  it('stores an event once when a relay dies after publishing and before marking', async () => {
    await enqueueEvents(t.db, [1, 2, 3, 4, 5].map((n) => ({ subject: `${prefix}.created`, payload: { n } })))
    const t0 = new Date()
    const leaseMs = 30_000

    // Relay A publishes, then hangs before it can mark the rows (as if the process died).
    let failA: (err: Error) => void = () => undefined
    const hung = new Promise<never>((_, reject) => (failA = reject))
    const hangingBus: EventBus = {
      ...bus,
      publish: async (message: BusPublish) => {
        await bus.publish(message)
        await hung
      },
    }
    const a = relay({ bus: hangingBus, now: () => t0, leaseMs, relayId: 'relay-a' })
    const aRun = a.runOnce()
    await waitFor(async () => (await probe.stored(`${prefix}.created`)) === 5, 'relay A to publish')
    expect(await countUnpublished(t.db)).toBe(5)

    // While A's lease holds, another relay leaves the rows alone...
    const b = relay({ now: () => new Date(t0.getTime() + 1_000), relayId: 'relay-b' })
    expect(await b.runOnce()).toBe(0)
    // ...and once it has run out, publishes them again: JetStream drops the duplicates.
    const c = relay({ now: () => new Date(t0.getTime() + leaseMs + 1), relayId: 'relay-c' })
    expect(await c.runOnce()).toBe(5)
    expect(await probe.stored(`${prefix}.created`)).toBe(5)
    expect(await countUnpublished(t.db)).toBe(0)

    // A wakes up failing: it must not touch rows it no longer holds.
    failA(new Error('connection lost'))
    expect(await aRun).toBe(0)
    const rows = await outboxRows(t.db)
    expect(rows.every((row) => row.published_at !== null && row.claimed_by === null && Number(row.attempts) === 0)).toBe(true)
  })

  it('stores an event once when a published row is published again', async () => {
    await enqueueEvents(t.db, [1, 2, 3].map((n) => ({ subject: `${prefix}.created`, payload: { n } })))
    const r = relay()
    expect(await r.runOnce()).toBe(3)
    await t.db('outbox').update({ published_at: null })
    expect(await r.runOnce()).toBe(3)
    expect(await probe.stored(`${prefix}.created`)).toBe(3)
  })

  it('keeps events while NATS is down and publishes each once when it returns', async () => {
    await nats.stop()
    try {
      await waitFor(async () => !(await bus.health()).ok, 'the bus to notice NATS is down')
      await t.db.transaction((trx) => enqueueEvents(trx, [1, 2, 3, 4].map((n) => ({ subject: `${prefix}.created`, payload: { n } }))))

      const r = relay({ pollIntervalMs: 50, backoffInitialMs: 50, backoffMaxMs: 200 })
      const started = performance.now()
      expect(await r.runOnce()).toBe(0)
      expect(performance.now() - started).toBeLessThan(1_000) // fails fast: the relay backs off, not hangs
      const rows = await outboxRows(t.db)
      expect(rows).toHaveLength(4)
      for (const row of rows) {
        expect(row.published_at).toBeNull()
        expect(row.claimed_by).toBeNull()
        expect(Number(row.attempts)).toBe(1)
        expect(String(row.last_error)).toMatch(/NATS/)
      }
      r.start()
    } finally {
      await nats.start()
    }
    await waitFor(async () => (await bus.health()).ok, 'the bus to reconnect')
    await waitFor(async () => (await countUnpublished(t.db)) === 0, 'the relay to publish the backlog')
    await probe.ready()
    expect(await probe.stored(`${prefix}.created`)).toBe(4)
  })

  it('publishes the backlog as soon as the bus reconnects, without waiting out its back-off', async () => {
    await nats.stop()
    // After its first failed cycle this relay would sleep a minute before trying again.
    const r = relay({ pollIntervalMs: 50, backoffInitialMs: 60_000, backoffMaxMs: 60_000 })
    try {
      await waitFor(async () => !(await bus.health()).ok, 'the bus to notice NATS is down')
      await t.db.transaction((trx) => enqueueEvents(trx, [1, 2].map((n) => ({ subject: `${prefix}.created`, payload: { n } }))))
      r.start()
      await waitFor(async () => (await outboxRows(t.db)).every((row) => Number(row.attempts) === 1) || undefined, 'the first publish attempt to fail')
    } finally {
      await nats.start()
    }
    // Well inside the minute of back-off.
    await waitFor(async () => (await countUnpublished(t.db)) === 0, 'the relay to publish once the bus is back', 20_000)
    await probe.ready()
    expect(await probe.stored(`${prefix}.created`)).toBe(2)
    expect((await outboxRows(t.db)).map((row) => Number(row.attempts))).toEqual([1, 1])
  })

  it('lets several relays share the backlog without publishing a row twice', async () => {
    const total = 120
    await enqueueEvents(t.db, Array.from({ length: total }, (_, n) => ({ subject: `${prefix}.created`, payload: { n } })))
    const drain = async (r: OutboxRelay, db: typeof t.db): Promise<number> => {
      let published = 0
      for (;;) {
        const n = await r.runOnce()
        published += n
        if (n === 0) {
          if ((await countUnpublished(db)) === 0) return published
          // The other relay holds the rest. Yield to I/O: SQLite answers synchronously, so a
          // tight loop would starve the other relay's publish acknowledgements.
          await new Promise((resolve) => setImmediate(resolve))
        }
      }
    }
    const dbA = t.connect()
    const dbB = t.connect()
    const a = relay({ db: dbA, batchSize: 10 })
    const b = relay({ db: dbB, batchSize: 10 })
    const [byA, byB] = await Promise.all([drain(a, dbA), drain(b, dbB)])
    expect(byA + byB).toBe(total)
    expect(await probe.stored(`${prefix}.created`)).toBe(total)
  })

  it('publishes right after the commit when started, without waiting for the poll interval', async () => {
    const r = relay({ pollIntervalMs: 60_000, wakeOnCommit: true })
    r.start()
    await t.db.transaction((trx) => enqueueEvent(trx, { subject: `${prefix}.created`, payload: { n: 1 } }))
    await waitFor(async () => (await probe.stored(`${prefix}.created`)) === 1, 'the started relay to publish', 5_000)
    await r.stop()
    expect(await countUnpublished(t.db)).toBe(0)
  })

  it('refuses events that could never be published, writing nothing', async () => {
    await expect(enqueueEvent(t.db, { subject: 'orders.created', payload: {} })).rejects.toThrow(ValidationError)
    await expect(enqueueEvent(t.db, { subject: `${prefix}.*`, payload: {} })).rejects.toThrow(ValidationError)
    await expect(enqueueEvent(t.db, { subject: `${prefix}.x`, payload: {}, messageId: 'not-a-uuid' })).rejects.toThrow(ValidationError)
    await expect(enqueueEvent(t.db, { subject: `${prefix}.x`, payload: { blob: 'x'.repeat(1_000_001) } })).rejects.toThrow(ValidationError)
    expect(await outboxRows(t.db)).toHaveLength(0)
  })

  it('purges published rows older than the cut-off and keeps the rest', async () => {
    const day = 86_400_000
    const now = new Date()
    await enqueueEvents(t.db, [1, 2, 3].map((n) => ({ subject: `${prefix}.created`, payload: { n } })))
    const [first, second] = (await outboxRows(t.db)).map((r) => Number(r.id))
    await t.db('outbox').where('id', first).update({ published_at: new Date(now.getTime() - 8 * day) })
    await t.db('outbox').where('id', second).update({ published_at: new Date(now.getTime() - 1 * day) })

    expect(await purgePublished(t.db, new Date(now.getTime() - 7 * day))).toBe(1)
    const left = (await outboxRows(t.db)).map((r) => Number(r.id))
    expect(left).not.toContain(first)
    expect(left).toHaveLength(2) // the recent one and the unpublished one
  })
})
