import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { apiServerEnv, loadConfig, nodeAgentEnv, orchestratorEnv, upEnv } from '../../../src/config/env.js'
import { parseDuration } from '../../../src/config/duration.js'
import { ConfigError } from '../../../src/errors.js'

describe('loadConfig', () => {
  it("defaults to SQLite files in ./.nodeplane and the spec's ports", () => {
    const config = loadConfig(upEnv, {})
    const dataDir = path.resolve('.nodeplane')
    expect(config.NODEPLANE_DATA_DIR).toBe(dataDir)
    expect(config.DATABASE_URL).toBe(`sqlite://${dataDir}/control-plane.db`)
    expect(config.PAYMENTS_DATABASE_URL).toBe(`sqlite://${dataDir}/payments.db`)
    expect([config.API_SERVER_PORT, config.AUTH_SERVER_PORT, config.AGENT_GATEWAY_PORT]).toEqual([8080, 8081, 9090])
    expect([config.PAYMENT_GRPC_PORT, config.PAYMENT_HTTP_PORT, config.PAYMENT_METRICS_PORT]).toEqual([50051, 8085, 9086])
    expect(config.NATS_URL).toBeUndefined()
  })

  it('takes one agent-gateway or several, comma-separated, and names a bad one', () => {
    const base = { AGENT_GATEWAY_CA_FILE: '/ca.pem', NODE_AGENT_NODE_ID: '0193a000-0000-7000-8000-000000000001', NODE_AGENT_TOKEN_FILE: '/t', NODE_AGENT_STATE_DIR: '/s' }
    expect(loadConfig(nodeAgentEnv, { ...base, AGENT_GATEWAY_URL: '10.0.0.1:9090, 10.0.0.2:9090' }).AGENT_GATEWAY_URL).toBe('10.0.0.1:9090,10.0.0.2:9090')
    let error: unknown
    try {
      loadConfig(nodeAgentEnv, { ...base, AGENT_GATEWAY_URL: '10.0.0.1:9090,nope' })
    } catch (err) {
      error = err
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).problems.join('\n')).toMatch(/AGENT_GATEWAY_URL.*must be host:port, or several separated by commas/)
  })

  it('handles 8 payment events at once by default, and refuses a concurrency outside 1-256 by name', () => {
    expect(loadConfig(orchestratorEnv, {}).PAYMENT_CONSUMER_CONCURRENCY).toBe(8)
    expect(loadConfig(upEnv, { PAYMENT_CONSUMER_CONCURRENCY: '32' }).PAYMENT_CONSUMER_CONCURRENCY).toBe(32)
    for (const bad of ['0', '257', 'many', '2.5']) {
      expect(() => loadConfig(orchestratorEnv, { PAYMENT_CONSUMER_CONCURRENCY: bad })).toThrow(new RegExp(`PAYMENT_CONSUMER_CONCURRENCY="${bad.replace('.', '\\.')}"`))
    }
  })

  it('puts the default databases inside NODEPLANE_DATA_DIR', () => {
    const config = loadConfig(apiServerEnv, { NODEPLANE_DATA_DIR: '/srv/np' })
    expect(config.DATABASE_URL).toBe('sqlite:///srv/np/control-plane.db')
  })

  it('names every offending variable in one error', () => {
    let error: unknown
    try {
      loadConfig(upEnv, { DATABASE_URL: 'mysql://x', API_SERVER_PORT: 'eighty', AGENT_GATEWAY_PORT: '70000', NATS_URL: 'http://x', OUTBOX_POLL_INTERVAL: 'soon' })
    } catch (err) {
      error = err
    }
    expect(error).toBeInstanceOf(ConfigError)
    const problems = (error as ConfigError).problems.join('\n')
    expect((error as ConfigError).problems).toHaveLength(5)
    expect(problems).toMatch(/DATABASE_URL="mysql:\/\/x": must be sqlite/)
    expect(problems).toMatch(/API_SERVER_PORT="eighty"/)
    expect(problems).toMatch(/AGENT_GATEWAY_PORT="70000": must be between 1 and 65535/)
    expect(problems).toMatch(/NATS_URL/)
    expect(problems).toMatch(/OUTBOX_POLL_INTERVAL="soon": "soon" is not a duration/)
  })

  it('never echoes database credentials', () => {
    expect(() => loadConfig(upEnv, { DATABASE_URL: 'mysql://admin:hunter2@db/x' })).toThrow(ConfigError)
    try {
      loadConfig(upEnv, { DATABASE_URL: 'mysql://admin:hunter2@db/x' })
    } catch (err) {
      expect(String((err as Error).message)).not.toContain('hunter2')
    }
  })
})

describe('parseDuration', () => {
  it('reads compound durations and rejects anything else', () => {
    expect(parseDuration('250ms')).toBe(250)
    expect(parseDuration('1h30m')).toBe(5_400_000)
    expect(parseDuration('7d')).toBe(604_800_000)
    expect(parseDuration('2w')).toBe(1_209_600_000)
    expect(parseDuration('')).toBeNull()
    expect(parseDuration('10')).toBeNull()
    expect(parseDuration('5 minutes')).toBeNull()
    expect(parseDuration('1h x')).toBeNull()
  })
})
