import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { openEventBus } from '../../../src/events/open-bus.js'

const logger = createLogger({ level: 'silent' })

describe('openEventBus', () => {
  it('refuses a separate daemon without NATS_URL, naming the variable', async () => {
    const attempt = openEventBus({ settings: {}, service: undefined, singleProcess: false, logger, name: 'orchestrator' })
    await expect(attempt).rejects.toThrow(ConfigError)
    await expect(attempt).rejects.toThrow(/NATS_URL/)
  })

  it('gives `nodeplane up` the in-process bus when NATS_URL is unset', async () => {
    const bus = await openEventBus({ settings: {}, service: undefined, singleProcess: true, logger, name: 'up' })
    expect(bus.kind).toBe('local')
    await bus.close()
  })
})
