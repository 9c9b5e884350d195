import { describe, expect, it } from 'vitest'
import { AGENT_RECONNECT, jittered } from '../../../src/node-agent/client.js'

describe('agent reconnect delays', () => {
  it('draws each delay from the upper half of the window, so a fleet spreads its attempts', () => {
    expect(jittered(1_000, () => 0)).toBe(500)
    expect(jittered(1_000, () => 0.5)).toBe(750)
    expect(jittered(1_000, () => 0.999_999)).toBe(1_000)
  })

  it('never waits longer than a second between rounds in production, so a gateway back is reached within 2 s', () => {
    expect(AGENT_RECONNECT.maxMs).toBeLessThanOrEqual(1_000)
    expect(jittered(AGENT_RECONNECT.maxMs)).toBeLessThanOrEqual(1_000)
  })
})
