import { describe, expect, it } from 'vitest'
import { AGENT_WAIT_STEP, agentCommandStep } from '../../../src/provisioning/agent-calls.js'
import { upgradeStep } from '../../../src/rollouts/node-upgrade.js'
import { resolveStepPolicy, retryDelayMs, STEP_PRESETS } from '../../../src/workflows/policy.js'

describe('step policies', () => {
  it('has the spec classes as presets (Limits: activity timeouts and retries)', () => {
    expect([STEP_PRESETS.default.timeoutMs, STEP_PRESETS.default.retry.maxAttempts]).toEqual([600_000, 3])
    expect([STEP_PRESETS.infrastructure.timeoutMs, STEP_PRESETS.infrastructure.retry.maxAttempts]).toEqual([900_000, 3])
    expect([STEP_PRESETS.agentWait.timeoutMs, STEP_PRESETS.agentWait.retry.maxAttempts]).toEqual([300_000, 20])
    expect(STEP_PRESETS.upgrade).toMatchObject({ timeoutMs: 600_000, heartbeatTimeoutMs: 30_000, retry: { maxAttempts: 3 } })
  })

  it('gives the lifecycle and rollout steps the spec class they belong to', () => {
    // Provision and migrate: waiting for the new host's agent is the agent wait class as it is.
    expect(resolveStepPolicy(AGENT_WAIT_STEP)).toEqual({ timeoutMs: 300_000, retry: { maxAttempts: 20, initialIntervalMs: 1_000, backoffCoefficient: 2, maximumIntervalMs: 60_000 } })
    // Agent commands: the default class, each attempt one AGENT_COMMAND_TIMEOUT plus a minute.
    expect(resolveStepPolicy(agentCommandStep(600_000))).toEqual({ ...STEP_PRESETS.default, timeoutMs: 660_000 })
    // A rollout's batch and a rollback: the upgrade class, 30 s heartbeat timeout, 3 attempts.
    const batch = resolveStepPolicy(upgradeStep(1_500_000))
    expect(batch).toEqual({ timeoutMs: 1_500_000, heartbeatTimeoutMs: 30_000, retry: STEP_PRESETS.upgrade.retry })
    expect(batch.retry.maxAttempts).toBe(3)
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
