import { describe, expect, it } from 'vitest'
import { resolveStepPolicy, retryDelayMs, STEP_PRESETS } from '../../../src/workflows/policy.js'

describe('step policies', () => {
  it('has the spec classes as presets (Limits: activity timeouts and retries)', () => {
    expect([STEP_PRESETS.default.timeoutMs, STEP_PRESETS.default.retry.maxAttempts]).toEqual([600_000, 3])
    expect([STEP_PRESETS.infrastructure.timeoutMs, STEP_PRESETS.infrastructure.retry.maxAttempts]).toEqual([900_000, 3])
    expect([STEP_PRESETS.agentWait.timeoutMs, STEP_PRESETS.agentWait.retry.maxAttempts]).toEqual([300_000, 20])
    expect(STEP_PRESETS.upgrade).toMatchObject({ timeoutMs: 600_000, heartbeatTimeoutMs: 30_000, retry: { maxAttempts: 3 } })
  })

  it('defaults to the default class and applies overrides on a preset', () => {
    expect(resolveStepPolicy()).toEqual(STEP_PRESETS.default)
    expect(resolveStepPolicy({ preset: 'upgrade', timeoutMs: 5, retry: { maxAttempts: 7 } })).toMatchObject({ timeoutMs: 5, heartbeatTimeoutMs: 30_000, retry: { maxAttempts: 7, initialIntervalMs: 1_000 } })
  })

  it('backs off exponentially up to the maximum', () => {
    const policy = { maxAttempts: 10, initialIntervalMs: 1_000, backoffCoefficient: 2, maximumIntervalMs: 5_000 }
    expect([1, 2, 3, 4, 5].map((a) => retryDelayMs(policy, a))).toEqual([1_000, 2_000, 4_000, 5_000, 5_000])
  })
})
