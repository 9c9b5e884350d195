/**
 * The fencing invariant (docs/node-agent.md, "Fencing"): AGENT_FENCE_TIMEOUT below
 * HEARTBEAT_TIMEOUT + MIGRATION_GRACE, checked where all three are read (the health evaluator and
 * `up`) before anything starts: a configuration error, exit 78, naming the settings.
 */
import { describe, expect, it } from 'vitest'
import { healthEvaluatorEnv, loadConfig, nodeAgentEnv, orchestratorEnv } from '../../../src/config/env.js'
import { assertFencing, fencingProblems } from '../../../src/config/fencing.js'
import { ConfigError } from '../../../src/errors.js'
import { nodeplane, tempDir } from '../../helpers/cli.js'

const agentEnv = {
  AGENT_GATEWAY_URL: '127.0.0.1:9090',
  AGENT_GATEWAY_CA_FILE: '/etc/nodeplane/ca.pem',
  NODE_AGENT_NODE_ID: '0190f5c2-0000-7000-8000-000000000000',
  NODE_AGENT_TOKEN_FILE: '/etc/nodeplane/agent-token',
  NODE_AGENT_STATE_DIR: '/var/lib/nodeplane-agent',
}

describe('fencing settings', () => {
  it('defaults to 60 s on both sides, which the default 60 s + 60 s migration wait leaves room for', () => {
    expect(loadConfig(nodeAgentEnv, agentEnv).NODE_AGENT_FENCE_TIMEOUT).toBe(60_000)
    expect(loadConfig(orchestratorEnv, {}).AGENT_FENCE_TIMEOUT).toBe(60_000)
    const evaluator = loadConfig(healthEvaluatorEnv, {})
    expect(evaluator.AGENT_FENCE_TIMEOUT).toBe(60_000)
    expect(fencingProblems(evaluator)).toEqual([])
  })

  it('refuses a fence timeout that is not shorter than HEARTBEAT_TIMEOUT + MIGRATION_GRACE', () => {
    expect(fencingProblems({ AGENT_FENCE_TIMEOUT: 119_999, HEARTBEAT_TIMEOUT: 60_000, MIGRATION_GRACE: 60_000 })).toEqual([])
    const problems = fencingProblems({ AGENT_FENCE_TIMEOUT: 120_000, HEARTBEAT_TIMEOUT: 60_000, MIGRATION_GRACE: 60_000 })
    expect(problems).toHaveLength(1)
    expect(problems[0]).toContain('AGENT_FENCE_TIMEOUT=120000ms: must be shorter than HEARTBEAT_TIMEOUT + MIGRATION_GRACE')
    expect(() => assertFencing({ AGENT_FENCE_TIMEOUT: 300_000, HEARTBEAT_TIMEOUT: 60_000, MIGRATION_GRACE: 60_000 })).toThrow(ConfigError)
  })

  it('refuses a malformed, zero or tiny fence timeout on either side', () => {
    for (const value of ['soon', '0s', '50ms', '']) {
      expect(() => loadConfig(nodeAgentEnv, { ...agentEnv, NODE_AGENT_FENCE_TIMEOUT: value }), value).toThrow(ConfigError)
      expect(() => loadConfig(orchestratorEnv, { AGENT_FENCE_TIMEOUT: value }), value).toThrow(ConfigError)
    }
  })

  it('the health evaluator exits 78 with the reason, before touching a database, when the invariant does not hold', { timeout: 60_000 }, async () => {
    const result = await nodeplane(['daemon', 'health-evaluator'], {
      env: { NODEPLANE_DATA_DIR: tempDir('nodeplane-fencing-config-'), HEARTBEAT_TIMEOUT: '5s', MIGRATION_GRACE: '2s', AGENT_FENCE_TIMEOUT: '7s' },
    })
    expect(result.exitCode).toBe(78)
    expect(result.stderr).toContain('AGENT_FENCE_TIMEOUT=7000ms: must be shorter than HEARTBEAT_TIMEOUT + MIGRATION_GRACE (5000ms + 2000ms = 7000ms)')
  })
})
