/**
 * The agent-gateway daemon reports a port it cannot bind like the HTTP daemons do: a
 * configuration error naming AGENT_GATEWAY_PORT, which the CLI turns into exit 78 (systemd does
 * not restart it). grpc-js reports the bind failure as a plain Error, not with a `code`.
 *
 * The same case through the binary (`nodeplane daemon agent-gateway`, exit 78) belongs beside
 * "agent-gateway with a certificate but no key exits 78" in test/e2e/daemon-agents.test.ts; the
 * e2e tests run the built dist/, so this one calls startAgentGateway directly.
 */
import net from 'node:net'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { startAgentGateway, type AgentGatewaySettings } from '../../../daemons/agent-gateway.js'
import { describeFailure } from '../../../src/cli/errors.js'
import { EXIT } from '../../../src/cli/exit-codes.js'
import { ConfigError } from '../../../src/errors.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { freePort } from '../../helpers/ports.js'
import { quiet } from './harness.js'

function settings(port: number): AgentGatewaySettings {
  return {
    NODEPLANE_DATA_DIR: path.join(tempDir('nodeplane-gateway-port-'), 'data'),
    AGENT_GATEWAY_HOST: '127.0.0.1',
    AGENT_GATEWAY_PORT: port,
    AGENT_HEARTBEAT_INTERVAL: 15_000,
    AGENT_PROGRESS_CHECK_INTERVAL: 30_000,
    HEARTBEAT_FLUSH_INTERVAL: 25,
    AGENT_COMMAND_POLL_INTERVAL: 250,
    AGENT_SYNC_CHANGE_LIMIT: 20,
    AGENT_SYNC_CHANGE_WINDOW: 600_000,
  }
}

describe('agent-gateway: its port in use', () => {
  const cleanups: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
  })

  it('is a configuration error naming AGENT_GATEWAY_PORT (exit 78), not an unexpected failure', async () => {
    const database: TestDatabase = await createTestDatabase('sqlite')
    cleanups.push(() => database.destroy())
    const blocker = net.createServer()
    const port = await freePort()
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve))
    cleanups.push(() => new Promise<void>((resolve) => blocker.close(() => resolve())))

    const failure = await startAgentGateway(settings(port), { db: database.db, logger: quiet }).then(
      () => undefined,
      (err: unknown) => err,
    )
    expect(failure).toBeInstanceOf(ConfigError)
    expect((failure as ConfigError).problems).toEqual([`AGENT_GATEWAY_PORT: port ${port} on 127.0.0.1 is already in use; stop whatever listens there or choose another port`])
    expect(describeFailure(failure).exitCode).toBe(EXIT.config)

    // The port free again, the same settings start (the failure left nothing behind).
    await new Promise<void>((resolve) => blocker.close(() => resolve()))
    const running = await startAgentGateway(settings(port), { db: database.db, logger: quiet })
    cleanups.push(() => running.stop())
    expect(running.target).toBe(`127.0.0.1:${port}`)
  })
})
