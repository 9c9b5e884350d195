import { describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { ValidationError } from '../../../src/errors.js'
import { defaultRetryDelayMs, runConsumer } from '../../../src/events/consumer.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { createLogger } from '../../../src/log.js'

describe('runConsumer options', () => {
  it('refuses durable names NATS or the idempotency table cannot hold, and a non-positive lifetime', async () => {
    const bus = createLocalBus()
    const base = {
      bus,
      db: {} as Db, // never reached: options are checked before subscribing
      logger: createLogger({ level: 'silent' }),
      subject: 'payment.*',
      decode: (p: Record<string, unknown>) => p,
      handle: async () => undefined,
    }
    try {
      for (const durable of ['main.app', 'main app', '', 'x'.repeat(101), 'a*']) {
        await expect(runConsumer({ ...base, durable, ttlMs: 1_000 })).rejects.toThrow(ValidationError)
      }
      await expect(runConsumer({ ...base, durable: 'main-app-payment', ttlMs: 0 })).rejects.toThrow(ValidationError)
      expect(bus.pending('main-app-payment')).toBe(0)
    } finally {
      await bus.close()
    }
  })

  it('backs off 1 s, 2 s, 4 s … up to a minute between redeliveries', () => {
    expect([1, 2, 3, 4, 7, 8, 50].map(defaultRetryDelayMs)).toEqual([1_000, 2_000, 4_000, 8_000, 60_000, 60_000, 60_000])
  })
})
