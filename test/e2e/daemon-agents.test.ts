import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { findRegistration } from '../../src/agent-gateway/registrations.js'
import { createAgentToken } from '../../src/agent-gateway/tokens.js'
import { findNode } from '../../src/nodes/node-store.js'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { insertTestNode } from '../helpers/fixtures.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'

describe('nodeplane daemon agent-gateway and daemon node-agent (separate processes, Postgres + NATS)', () => {
  let nats: NatsServer
  let database: TestDatabase

  beforeAll(async () => {
    nats = await startNats()
    database = await createTestDatabase('postgres')
  })
  afterAll(async () => {
    await database?.destroy()
    await nats?.destroy()
  })

  it('a node agent registers with the gateway over TLS and heartbeats; both stop on SIGTERM with 143', async () => {
    const dir = tempDir()
    const port = await freePort()
    const gateway = spawnNodeplane(['daemon', 'agent-gateway', '--data-dir', path.join(dir, 'data')], {
      env: { DATABASE_URL: database.url, NATS_URL: nats.url, AGENT_GATEWAY_PORT: String(port), HEARTBEAT_FLUSH_INTERVAL: '100ms' },
    })
    const caFile = path.join(dir, 'data', 'agent-ca', 'ca.pem')
    await waitFor(async () => fs.existsSync(caFile), 'the development CA')

    const node = await insertTestNode(database.db)
    const tokenFile = path.join(dir, 'token')
    fs.writeFileSync(tokenFile, await createAgentToken(database.db, node.id), { mode: 0o600 })
    const agent = spawnNodeplane(['daemon', 'node-agent'], {
      env: {
        AGENT_GATEWAY_URL: `127.0.0.1:${port}`,
        AGENT_GATEWAY_CA_FILE: caFile,
        NODE_AGENT_NODE_ID: node.id,
        NODE_AGENT_TOKEN_FILE: tokenFile,
        NODE_AGENT_STATE_DIR: path.join(dir, 'agent'),
        NODE_AGENT_HEARTBEAT_INTERVAL: '200ms',
      },
    })
    try {
      await waitFor(async () => findRegistration(database.db, node.id), 'registration', 30_000)
      await waitFor(async () => (await findNode(database.db, node.id))?.last_heartbeat, 'a heartbeat written by the gateway', 30_000)
      expect(fs.statSync(path.join(dir, 'agent', 'agent-key')).mode & 0o777).toBe(0o600)
    } finally {
      agent.kill('SIGTERM')
      gateway.kill('SIGTERM')
    }
    const [agentResult, gatewayResult] = await Promise.all([agent, gateway])
    expect(agentResult.exitCode).toBe(143)
    expect(gatewayResult.exitCode).toBe(143)
    const gatewayLog = jsonLogLines(gatewayResult.all)
    expect(gatewayLog.some((l) => l.msg === 'agent registered')).toBe(true)
    expect(gatewayLog.some((l) => l.msg === 'serving agents with the development CA; set AGENT_GATEWAY_TLS_CERT_FILE and AGENT_GATEWAY_TLS_KEY_FILE in production')).toBe(true)
    const token = fs.readFileSync(tokenFile, 'utf8')
    expect(String(gatewayResult.all)).not.toContain(token)
    expect(String(agentResult.all)).not.toContain(token)
  })

  it('node-agent without its settings exits 78 naming every missing variable', async () => {
    const result = await nodeplane(['daemon', 'node-agent'])
    expect(result.exitCode).toBe(78)
    for (const variable of ['AGENT_GATEWAY_URL', 'AGENT_GATEWAY_CA_FILE', 'NODE_AGENT_NODE_ID', 'NODE_AGENT_TOKEN_FILE', 'NODE_AGENT_STATE_DIR']) {
      expect(result.stderr).toContain(variable)
    }
  })

  it('node-agent with a token file that does not exist exits 78 naming it', async () => {
    const dir = tempDir()
    fs.writeFileSync(path.join(dir, 'ca.pem'), 'not used')
    const result = await nodeplane(['daemon', 'node-agent'], {
      env: {
        AGENT_GATEWAY_URL: '127.0.0.1:9',
        AGENT_GATEWAY_CA_FILE: path.join(dir, 'ca.pem'),
        NODE_AGENT_NODE_ID: '0190f5c2-0000-7000-8000-000000000000',
        NODE_AGENT_TOKEN_FILE: path.join(dir, 'missing-token'),
        NODE_AGENT_STATE_DIR: path.join(dir, 'state'),
      },
    })
    expect(result.exitCode).toBe(78)
    expect(result.stderr).toMatch(/NODE_AGENT_TOKEN_FILE=.*missing-token.*file not found/)
  })

  it("agent-gateway on a taken port exits 78 with the reason on stderr, and gRPC's own diagnostic is a JSON log line, not text", async () => {
    const port = await freePort()
    const blocker = net.createServer()
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve))
    try {
      const result = await nodeplane(['daemon', 'agent-gateway', '--data-dir', path.join(tempDir(), 'data')], {
        env: { DATABASE_URL: database.url, NATS_URL: nats.url, AGENT_GATEWAY_PORT: String(port) },
      })
      expect(result.exitCode).toBe(78)
      expect(result.stderr).toContain(`AGENT_GATEWAY_PORT: port ${port} on 127.0.0.1 is already in use`)
      expect(result.stderr).not.toMatch(/\| server \|/)
      expect(jsonLogLines(result.stdout).filter((l) => l.component === 'grpc')).toEqual([
        expect.objectContaining({ level: 'warn', daemon: 'agent-gateway', msg: 'No address added out of total 1 resolved' }),
      ])
    } finally {
      blocker.close()
    }
  })

  it('agent-gateway with a certificate but no key exits 78', async () => {
    const dir = tempDir()
    fs.writeFileSync(path.join(dir, 'cert.pem'), 'x')
    const result = await nodeplane(['daemon', 'agent-gateway'], {
      env: { DATABASE_URL: database.url, NATS_URL: nats.url, AGENT_GATEWAY_PORT: String(await freePort()), AGENT_GATEWAY_TLS_CERT_FILE: path.join(dir, 'cert.pem') },
    })
    expect(result.exitCode).toBe(78)
    expect(result.stderr).toContain('AGENT_GATEWAY_TLS_CERT_FILE and AGENT_GATEWAY_TLS_KEY_FILE: set both')
  })
})
