/**
 * The idempotency store on both databases: a key's lifetime, expiry purge, and that marking a
 * key commits (or rolls back) with the caller's own writes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import {
  AlreadyProcessedError,
  findProcessed,
  isProcessed,
  markProcessed,
  purgeExpired,
} from '../../../src/events/idempotency.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { waitFor } from '../../helpers/ports.js'

const HOUR = 3_600_000
const DAY = 24 * HOUR

describe.each(DIALECTS)('idempotency store on %s', (dialect) => {
  let t: TestDatabase
  const t0 = new Date('2025-03-01T12:00:00.000Z')
  const at = (ms: number) => new Date(t0.getTime() + ms)

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    await t.db.schema.createTable('test_effects', (table) => {
      table.increments('id')
      table.string('note').notNullable()
    })
  })
  afterEach(async () => {
    await t.destroy()
  })

  it('remembers a key under idempotency:{key} for its lifetime, then forgets it', async () => {
    await markProcessed(t.db, 'main-app-payment:m1', 'main-app-payment', 7 * DAY, t0)
    const row = await t.db('idempotency_keys').first()
    expect(row.key).toBe('idempotency:main-app-payment:m1')
    expect(await findProcessed(t.db, 'main-app-payment:m1', at(HOUR))).toEqual({
      key: 'main-app-payment:m1',
      consumer: 'main-app-payment',
      processedAt: t0,
      expiresAt: at(7 * DAY),
    })
    expect(await isProcessed(t.db, 'main-app-payment:m1', at(7 * DAY - 1))).toBe(true)
    expect(await isProcessed(t.db, 'main-app-payment:m1', at(7 * DAY))).toBe(false)
    expect(await isProcessed(t.db, 'main-app-payment:other', t0)).toBe(false)
  })

  it('refuses to mark a live key twice, and allows it again once expired', async () => {
    await markProcessed(t.db, 'k', 'c', DAY, t0)
    await expect(markProcessed(t.db, 'k', 'c', DAY, at(HOUR))).rejects.toThrow(AlreadyProcessedError)
    // Expired but not purged yet: processing again is what the lifetime means.
    await markProcessed(t.db, 'k', 'c', DAY, at(DAY + 1))
    expect(await isProcessed(t.db, 'k', at(DAY + 2))).toBe(true)
    await expect(markProcessed(t.db, 'k', 'c', 0, t0)).rejects.toThrow(ValidationError)
  })

  it('commits the key with the caller’s writes, or neither', async () => {
    await markProcessed(t.db, 'k', 'c', DAY, t0)
    // A second processing of the same key: its writes must roll back with the refused mark.
    await expect(
      t.db.transaction(async (trx) => {
        await trx('test_effects').insert({ note: 'second' })
        await markProcessed(trx, 'k', 'c', DAY, at(1))
      }),
    ).rejects.toThrow(AlreadyProcessedError)
    // A failing handler after the mark: the key rolls back with it.
    await expect(
      t.db.transaction(async (trx) => {
        await markProcessed(trx, 'k2', 'c', DAY, t0)
        await trx('test_effects').insert({ note: 'failed' })
        throw new Error('handler failed')
      }),
    ).rejects.toThrow('handler failed')
    expect(Number((await t.db('test_effects').count({ n: '*' }).first())?.n)).toBe(0)
    expect(await isProcessed(t.db, 'k2', t0)).toBe(false)
  })

  it('purges only expired keys', async () => {
    await markProcessed(t.db, 'old', 'c', HOUR, t0)
    await markProcessed(t.db, 'edge', 'c', 2 * HOUR, t0)
    await markProcessed(t.db, 'young', 'c', 7 * DAY, t0)
    expect(await purgeExpired(t.db, at(2 * HOUR))).toBe(2)
    const left = (await t.db('idempotency_keys').select('key')).map((r: { key: string }) => r.key)
    expect(left).toEqual(['idempotency:young'])
    expect(await purgeExpired(t.db, at(2 * HOUR))).toBe(0)
  })

  if (dialect === 'postgres') {
    it('makes a concurrent second mark of the same key wait, then refuses it once the first commits', async () => {
      const other = t.connect()
      let releaseFirst: () => void = () => undefined
      const firstHolds = new Promise<void>((r) => (releaseFirst = r))
      let firstMarked: () => void = () => undefined
      const marked = new Promise<void>((r) => (firstMarked = r))
      const first = t.db.transaction(async (trx) => {
        await markProcessed(trx, 'k', 'c', DAY, t0)
        firstMarked()
        await firstHolds
        await trx('test_effects').insert({ note: 'first' })
      })
      await marked
      const second = other.transaction(async (trx) => {
        await markProcessed(trx, 'k', 'c', DAY, t0)
        await trx('test_effects').insert({ note: 'second' })
      })
      second.catch(() => undefined)
      // The second blocks on the first's uncommitted key instead of running its handler.
      await waitFor(async () => {
        const r = await t.db.raw(
          "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
        )
        return (r.rows[0] as { n: number }).n === 1
      }, 'the second transaction to wait for the first')
      releaseFirst()
      await first
      await expect(second).rejects.toThrow(AlreadyProcessedError)
      expect((await t.db('test_effects').select('note')).map((r: { note: string }) => r.note)).toEqual(['first'])
    })
  }
})
