import { describe, expect, it } from 'vitest'
import { healthPolicySchema, type HealthPolicy } from '../../../src/config/health-policy.js'
import { applicationHealthFor, derivedMetrics, referenceHead, ruleResult } from '../../../src/health/policy-evaluation.js'

const policy: HealthPolicy = healthPolicySchema.parse({
  rules: [
    { metric: 'peer_count', degraded_below: 2, critical_below: 1 },
    { metric: 'block_lag', degraded_above: 5, critical_above: 30 },
  ],
})
const report = (metrics: Record<string, number>, processState = 'running') => ({ reported_at: new Date(), process_state: processState, metrics })

describe('application health policy', () => {
  it('judges each threshold at its boundary: below and above are strict', () => {
    const rule = { metric: 'peer_count', degraded_below: 2, critical_below: 1 }
    expect([3, 2, 1.5, 1, 0].map((v) => ruleResult(rule, v))).toEqual(['ok', 'ok', 'degraded', 'degraded', 'critical'])
    const lag = { metric: 'block_lag', degraded_above: 5, critical_above: 30 }
    expect([0, 5, 6, 30, 31].map((v) => ruleResult(lag, v))).toEqual(['ok', 'ok', 'degraded', 'degraded', 'critical'])
    expect(ruleResult(rule, undefined)).toBe('ok')
  })

  it('takes the worst rule, derived metrics first, and a crash loop as the policy says', () => {
    expect(applicationHealthFor(report({ peer_count: 3 }), policy)).toBe('ok')
    expect(applicationHealthFor(report({ peer_count: 1 }), policy, { block_lag: 2 })).toBe('degraded')
    expect(applicationHealthFor(report({ peer_count: 3, block_lag: 0 }), policy, { block_lag: 40 })).toBe('critical')
    expect(applicationHealthFor(report({ peer_count: 3 }, 'crash_loop'), policy)).toBe('critical')
    expect(applicationHealthFor(report({ peer_count: 3 }, 'crash_loop'), { ...policy, crash_loop: 'degraded' })).toBe('degraded')
    expect(applicationHealthFor(report({}), { rules: [], crash_loop: 'critical', block_lag_reference: 'fleet' })).toBe('ok')
  })

  it('a chain process that is not running is critical whatever its (missing) metrics', () => {
    for (const state of ['stopped', 'unconfigured']) expect(applicationHealthFor(report({}, state), { rules: [], crash_loop: 'degraded', block_lag_reference: 'fleet' }), state).toBe('critical')
  })

  it('does not judge a process the agent reports as still starting', () => {
    expect(applicationHealthFor(report({ peer_count: 0 }, 'starting'), policy, { block_lag: 40 })).toBe('unknown')
    expect(applicationHealthFor(report({ peer_count: 0 }, 'running'), policy)).toBe('critical')
  })

  it('uses the highest head of the fleet, including what syncing nodes see, as the block_lag reference', () => {
    expect(referenceHead([report({ block_height: 10 }), report({ block_height: 7, highest_block: 12 }), report({})])).toBe(12)
    expect(referenceHead([report({ peer_count: 1 })])).toBeUndefined()
  })

  it('measures block_lag against the fleet\'s head by default, or with block_lag_reference node against the head the node itself reports', () => {
    expect(policy.block_lag_reference).toBe('fleet')
    const own = healthPolicySchema.parse({ rules: policy.rules, block_lag_reference: 'node' })
    expect(own.block_lag_reference).toBe('node')

    expect(derivedMetrics(report({ block_height: 90 }), policy, 100)).toEqual({ block_lag: 10 })
    expect(derivedMetrics(report({ block_height: 90, highest_block: 95 }), policy, 100)).toEqual({ block_lag: 10 })
    expect(derivedMetrics(report({ block_height: 90 }), policy, undefined)).toEqual({})

    // The fleet's head is not the node's reference: only its own highest_block is.
    expect(derivedMetrics(report({ block_height: 90, highest_block: 95 }), own, 1_000)).toEqual({ block_lag: 5 })
    expect(derivedMetrics(report({ block_height: 90, highest_block: 140 }), own, undefined)).toEqual({ block_lag: 50 })
    // No highest_block (synced, or a syncing client that omits it): no block_lag, the rule is not judged.
    expect(derivedMetrics(report({ block_height: 90 }), own, 1_000)).toEqual({})
    expect(applicationHealthFor(report({ peer_count: 3, block_height: 90 }), own, derivedMetrics(report({ block_height: 90 }), own, 1_000))).toBe('ok')
    expect(applicationHealthFor(report({ peer_count: 3, block_height: 90 }), policy, derivedMetrics(report({ block_height: 90 }), policy, 1_000))).toBe('critical')
  })

  it('refuses a block_lag_reference other than fleet or node', () => {
    expect(healthPolicySchema.safeParse({ block_lag_reference: 'network' }).error?.issues.map((i) => i.path)).toEqual([['block_lag_reference']])
    expect(healthPolicySchema.safeParse({ block_lag_reference: 'node' }).success).toBe(true)
  })

  it('refuses rules without a threshold, with thresholds in the wrong order, or with a bad metric name', () => {
    const problems = (rule: unknown) => healthPolicySchema.safeParse({ rules: [rule] }).error?.issues.map((i) => i.message) ?? []
    expect(problems({ metric: 'peer_count' })).toEqual(['needs at least one of degraded_below, critical_below, degraded_above, critical_above'])
    expect(problems({ metric: 'peer_count', degraded_below: 1, critical_below: 2 })).toEqual(['critical_below must not be above degraded_below'])
    expect(problems({ metric: 'lag', degraded_above: 10, critical_above: 5 })).toEqual(['critical_above must not be below degraded_above'])
    expect(problems({ metric: 'Peer Count', critical_below: 1 })).toHaveLength(1)
    expect(healthPolicySchema.safeParse({ rules: [], surprise: true }).success).toBe(false)
  })
})
