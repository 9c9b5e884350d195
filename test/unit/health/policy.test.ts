import { describe, expect, it } from 'vitest'
import { DEFAULT_HEALTH_POLICY, healthPolicySchema, type HealthPolicy } from '../../../src/config/health-policy.js'
import { applicationHealthFor, derivedMetrics, FleetHeads, referenceHead, reportedHead, ruleResult } from '../../../src/health/policy-evaluation.js'

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
    expect(applicationHealthFor(report({}), DEFAULT_HEALTH_POLICY)).toBe('ok')
  })

  it("judges what the gateways saw of the node's endpoint, never an agent's own claim of it", () => {
    // Defaults: degraded above 0.2 of calls failing, critical above 0.5.
    expect(applicationHealthFor(report({ peer_count: 3 }), policy, { rpc_upstream_failure_ratio: 0.2 })).toBe('ok')
    expect(applicationHealthFor(report({ peer_count: 3 }), policy, { rpc_upstream_failure_ratio: 0.25 })).toBe('degraded')
    const findings: string[] = []
    expect(applicationHealthFor(report({ peer_count: 3 }), policy, { rpc_upstream_failure_ratio: 1 }, findings)).toBe('critical')
    expect(findings).toEqual(['rpc_upstream_failure_ratio 1 (critical above 0.5)'])
    // An agent reporting the ratio itself moves nothing.
    expect(applicationHealthFor(report({ peer_count: 3, rpc_upstream_failure_ratio: 1 }), policy)).toBe('ok')
    const strict = healthPolicySchema.parse({ rpc_upstream_failures: { degraded_above: 0, critical_above: 0.1 } })
    expect(applicationHealthFor(report({}), strict, { rpc_upstream_failure_ratio: 0.05 })).toBe('degraded')
    expect(healthPolicySchema.safeParse({ rpc_upstream_failures: { degraded_above: 0.5, critical_above: 0.2 } }).success).toBe(false)
    expect(healthPolicySchema.safeParse({ rpc_upstream_failures: { degraded_above: 2, critical_above: 3 } }).success).toBe(false)
  })

  it('a chain process that is not running is critical whatever its (missing) metrics', () => {
    for (const state of ['stopped', 'unconfigured']) expect(applicationHealthFor(report({}, state), { ...DEFAULT_HEALTH_POLICY, crash_loop: 'degraded' }), state).toBe('critical')
  })

  it('does not judge a process the agent reports as still starting', () => {
    expect(applicationHealthFor(report({ peer_count: 0 }, 'starting'), policy, { block_lag: 40 })).toBe('unknown')
    expect(applicationHealthFor(report({ peer_count: 0 }, 'running'), policy)).toBe('critical')
  })

  it('takes a report\'s head as the higher of block_height and the highest_block a syncing node sees', () => {
    expect(reportedHead(report({ block_height: 10 }))).toBe(10)
    expect(reportedHead(report({ block_height: 7, highest_block: 12 }))).toBe(12)
    expect(reportedHead(report({ peer_count: 1 }))).toBeUndefined()
  })

  it('uses the lower median of the other nodes\' heads as the fleet reference, none with fewer than two others', () => {
    expect(referenceHead([])).toBeUndefined()
    expect(referenceHead([100])).toBeUndefined()
    expect(referenceHead([100, 1e12])).toBe(100)
    expect(referenceHead([90, 100, 1e12])).toBe(100)
    expect(referenceHead([90, 100, 110, 1e12])).toBe(100)
  })

  it('never lets one node move the reference of the others beyond what another node reports', () => {
    const honest = [100, 101, 99, 100, 98]
    const fleet = new FleetHeads([...honest, 1e12])
    // Every honest node's reference stays within the honest heads, whatever the liar claims.
    for (const own of honest) {
      const ref = fleet.referenceFor(own) as number
      expect(ref).toBeGreaterThanOrEqual(98)
      expect(ref).toBeLessThanOrEqual(101)
    }
    // The node's own head is not its own reference: with two nodes there is no fleet reference.
    expect(new FleetHeads([100, 1e12]).referenceFor(100)).toBeUndefined()
    expect(new FleetHeads([100, 1e12]).referenceFor(1e12)).toBeUndefined()
    // Matches the definition (lower median of the others) for every position, duplicates included.
    const heads = [5, 7, 7, 9, 12, 40]
    const all = new FleetHeads(heads)
    heads.forEach((own, i) => {
      const others = heads.filter((_, j) => j !== i).sort((a, b) => a - b)
      expect(all.referenceFor(own)).toBe(referenceHead(others))
    })
    expect(all.referenceFor(undefined)).toBe(referenceHead(heads))
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
