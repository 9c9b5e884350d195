/**
 * The verdict of health validation over a window's observations (src/rollouts/health-validation.ts):
 * a node just restarted on a new binary may fail its probe until it comes up; once up, a critical
 * report fails at once; never coming up, a stall, a restart, down or failed fail.
 */
import { describe, expect, it } from 'vitest'
import { DEFAULT_RPC_UPSTREAM_FAILURES, type HealthPolicy } from '../../../src/config/health-policy.js'
import { HealthJudge, type Observation } from '../../../src/rollouts/health-validation.js'

const since = new Date('2026-11-25T12:00:00Z')
const policy: HealthPolicy = {
  block_lag_reference: 'node',
  crash_loop: 'critical',
  rules: [{ metric: 'rpc_up', critical_below: 1 }, { metric: 'peer_count', degraded_below: 2, critical_below: 1 }],
  rpc_upstream_failures: DEFAULT_RPC_UPSTREAM_FAILURES,
}
const up = { rpc_up: 1, peer_count: 3 }
const starting = { rpc_up: 0 }

function report(secondsAfter: number, metrics: Record<string, number>, extra: Partial<Observation> = {}): Observation {
  return {
    state: 'maintenance',
    reported_at: new Date(since.getTime() + secondsAfter * 1000),
    binary_version: '1.1.0',
    sync_status: 'synced',
    process_state: 'running',
    restarts_in_window: 0,
    metrics,
    ...extra,
  }
}

function judge(observations: Observation[]) {
  const j = new HealthJudge(since, policy, '1.1.0')
  for (const seen of observations) {
    const failure = j.see(seen)
    if (failure) return failure
  }
  return j.end(5_000)
}

describe('health validation verdict', () => {
  it('passes a node whose probe fails while it starts and answers once it is up', () => {
    expect(judge([report(1, starting), report(2, starting), report(3, up), report(4, up)])).toEqual({ ok: true })
  })

  it('counts only reports of the version installed: a healthy heartbeat of the old binary received after the upgrade is no proof', () => {
    const old = { binary_version: '1.0.0' }
    expect(judge([report(1, up, old), report(2, up, old), report(3, starting)])).toMatchObject({ ok: false, reason: expect.stringMatching(/never came up/) })
    expect(judge([report(1, up, old), report(2, up, old)])).toMatchObject({ ok: false, reason: expect.stringMatching(/^no heartbeat within/) })
    expect(judge([report(1, up, old), report(2, starting), report(3, up), report(4, up)])).toEqual({ ok: true })
  })

  it('fails at once when application health turns critical after the node came up', () => {
    expect(judge([report(1, starting), report(2, up), report(3, { rpc_up: 1, peer_count: 0 }), report(4, up)])).toEqual({
      ok: false,
      reason: "application health is critical by the chain's health policy",
    })
  })

  it('does not count a report of a process the agent says is still starting as the node coming up', () => {
    const agentStarting = { process_state: 'starting' }
    expect(judge([report(1, starting, agentStarting), report(2, starting, agentStarting), report(3, up), report(4, up)])).toEqual({ ok: true })
    expect(judge([report(1, starting, agentStarting), report(2, starting, agentStarting), report(3, starting)])).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/never came up/),
    })
  })

  it('fails a node that never comes up within the window', () => {
    expect(judge([report(1, starting), report(2, starting), report(4, starting)])).toEqual({
      ok: false,
      reason: "application health stayed critical by the chain's health policy for the 5 s after the upgrade (the node never came up)",
    })
  })

  it('counts only reports after the upgrade: an old report is not a heartbeat, nor does it make the node up', () => {
    expect(judge([report(-3, up), report(0, up)])).toEqual({ ok: false, reason: 'no heartbeat within 5 s of the upgrade' })
    expect(judge([report(-3, up), report(1, starting)])).toMatchObject({ ok: false, reason: expect.stringMatching(/never came up/) })
  })

  it('fails on a stall, a crash loop, a restart while watched, or the node going down, even before it is up', () => {
    expect(judge([report(1, starting, { sync_status: 'stalled' })])).toEqual({ ok: false, reason: 'the agent reports the chain head stalled' })
    expect(judge([report(1, up, { process_state: 'crash_loop' })])).toEqual({ ok: false, reason: 'the chain process is in a crash loop' })
    expect(judge([report(1, starting, { restarts_in_window: 2 }), report(2, up, { restarts_in_window: 3 })])).toEqual({
      ok: false,
      reason: 'the chain process restarted 1 time(s) while being validated',
    })
    expect(judge([report(1, up), { ...report(2, up), state: 'down' }])).toEqual({ ok: false, reason: 'the node is down' })
  })

  it('a degraded node is up and passes', () => {
    expect(judge([report(1, { rpc_up: 1, peer_count: 1 })])).toEqual({ ok: true })
  })
})
