import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { AgentClient, CommandReport, CommandRunner } from '../../../src/node-agent/client.js'
import { checkCommand, enqueueCommand, getCommand } from '../../../src/agent-gateway/commands.js'
import type { CommandType } from '../../../src/agent-gateway/protocol.js'
import { findRegistration } from '../../../src/agent-gateway/registrations.js'
import { createAgentToken, revokeAgentToken } from '../../../src/agent-gateway/tokens.js'
import type { Db } from '../../../src/db/knex.js'
import { fromJson, toDateOrNull } from '../../../src/db/dialect.js'
import { healthEventSubject } from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { seal } from '../../../src/secrets/sealed-box.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { freePort, waitFor } from '../../helpers/ports.js'
import { otherCa, startClient, startGateway, type RunningGateway } from './harness.js'

type Handler = (command: { id: string; payload: unknown }, report: CommandReport) => Promise<unknown>

/** The command side the tests drive: the agent's real executor is tested in test/integration/agent. */
class ScriptedRunner implements CommandRunner {
  readonly executed: string[] = []
  readonly handlers = new Map<CommandType, Handler>()
  execute(command: { id: string; type: CommandType; payload: unknown }, report: CommandReport): Promise<unknown> {
    this.executed.push(command.id)
    const handler = this.handlers.get(command.type)
    return handler ? handler(command, report) : Promise.resolve({ done: command.type })
  }
}

const START = { binary_name: 'devnet-node', artifact: { version: '1.0.0', url: 'file:///tmp/devnet-node', sha256: 'a'.repeat(64) }, run: { runtime: 'node' } }

describe.each(DIALECTS)('agent protocol over gRPC with TLS on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let gateways: RunningGateway[] = []
  let clients: AgentClient[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => {
    await Promise.all(clients.map((c) => c.stop()))
    await Promise.all(gateways.map((g) => g.stop()))
    clients = []
    gateways = []
  })
  afterAll(async () => {
    await t.destroy()
  })

  async function gateway(overrides = {}, port = 0): Promise<RunningGateway> {
    const g = await startGateway(db, overrides, port)
    gateways.push(g)
    return g
  }

  async function nodeWithToken(): Promise<{ nodeId: string; token: string }> {
    const node = await insertTestNode(db)
    return { nodeId: node.id, token: await createAgentToken(db, node.id) }
  }

  function agent(target: string, nodeId: string, token: string, runner: CommandRunner = new ScriptedRunner(), overrides = {}) {
    const started = startClient(target, nodeId, token, runner, overrides)
    clients.push(started.client)
    return started
  }

  it('registers an agent and records its versions, host and public key', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const { client, publicKey } = agent(g.target, nodeId, token)
    await client.start()
    expect(client.connected).toBe(true)
    const registration = await findRegistration(db, nodeId)
    expect(registration).toMatchObject({ agent_version: '0.1.0-test', binary_version: '1.0.0', gateway_id: g.gateway.gatewayId, public_key: Buffer.from(publicKey).toString('base64') })
    expect(registration?.connected_at).not.toBeNull()
    expect(g.gateway.connectedNodes).toBe(1)
  })

  it('refuses a wrong token, an unknown node and a revoked token with UNAUTHENTICATED, and records nothing', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const wrong = agent(g.target, nodeId, `npt_${'A'.repeat(43)}`)
    await wrong.client.start()
    expect(wrong.fatal).toHaveLength(1)
    expect(wrong.fatal[0]).toMatch(/^UNAUTHENTICATED: agent token refused/)
    expect(wrong.fatal[0]).not.toContain(token)

    const other = await nodeWithToken()
    const crossed = agent(g.target, other.nodeId, token)
    await crossed.client.start()
    expect(crossed.fatal[0]).toMatch(/^UNAUTHENTICATED/)

    await revokeAgentToken(db, nodeId)
    const revoked = agent(g.target, nodeId, token)
    await revoked.client.start()
    expect(revoked.fatal[0]).toMatch(/^UNAUTHENTICATED/)
    expect(await findRegistration(db, nodeId)).toBeUndefined()
    expect(g.gateway.connectedNodes).toBe(0)
  })

  it('refuses the agent of a terminated node with FAILED_PRECONDITION', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    await setNodeState(db, nodeId, 'terminated')
    const { client, fatal } = agent(g.target, nodeId, token)
    await client.start()
    expect(fatal[0]).toMatch(/^FAILED_PRECONDITION: node .* is terminated/)
  })

  it('does not talk to a gateway whose certificate another CA signed', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const { client } = agent(g.target, nodeId, token, new ScriptedRunner(), { ca: otherCa() })
    void client.start()
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(client.connected).toBe(false)
    expect(await findRegistration(db, nodeId)).toBeUndefined()
  })

  it('records heartbeats in batches and forwards a sync change to the health state machine', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const before = await findNode(db, nodeId)
    expect(before?.last_heartbeat).toBeNull()
    const { client, host } = agent(g.target, nodeId, token)
    host.state.metrics = { block_height: 42, peer_count: 3 }
    await client.start()

    const status = await waitFor(async () => db('agent_status').where({ node_id: nodeId }).first(), 'agent status row')
    expect(fromJson(status.metrics)).toEqual({ block_height: 42, peer_count: 3 })
    expect(status).toMatchObject({ process_state: 'running', binary_version: '1.0.0' })
    // The first report moved sync_status from unknown to syncing through the state machine.
    const synced = await waitFor(async () => {
      const node = await findNode(db, nodeId)
      return node?.sync_status === 'syncing' && node.last_heartbeat ? node : undefined
    }, 'first heartbeat and sync status')
    const later = await waitFor(async () => {
      const node = await findNode(db, nodeId)
      return node?.last_heartbeat && synced.last_heartbeat && node.last_heartbeat > synced.last_heartbeat ? node : undefined
    }, 'a later heartbeat')
    // Heartbeats themselves are not state-machine writes: the node's version does not move.
    expect(later.version).toBe(synced.version)
    expect(synced.version).toBe((before?.version ?? 0) + 1)

    host.state.sync_status = 'synced'
    await waitFor(async () => (await findNode(db, nodeId))?.sync_status === 'synced', 'sync_status synced')
    const events = await db('outbox').where({ subject: healthEventSubject(nodeId) })
    const syncEvents = events.map((e: { payload: unknown }) => fromJson<{ dimension: string; writer: string; to: string }>(e.payload)).filter((e) => e.dimension === 'sync_status')
    expect(syncEvents).toEqual([expect.objectContaining({ writer: 'sync_event', to: 'syncing' }), expect.objectContaining({ writer: 'sync_event', to: 'synced' })])
  })

  it('delivers a command; the agent acknowledges, reports progress and completes it', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    runner.handlers.set('configure', async (_cmd, report) => {
      report.progress('preparing', 'fetching artifact')
      await released
      return { binary_version: '1.0.0' }
    })
    // No stall checks while the test holds the command: this test is about the report sequence.
    const { client } = agent(g.target, nodeId, token, runner, { progressCheckIntervalMs: 60_000 })
    await client.start()

    const command = await enqueueCommand(db, { nodeId, type: 'configure', payload: START })
    const running = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.progress_phase === 'preparing' ? c : undefined
    }, 'progress recorded')
    expect(running).toMatchObject({ status: 'running', progress_message: 'fetching artifact', stall_count: 0, gateway_id: g.gateway.gatewayId })
    expect(running.acknowledged_at).not.toBeNull()
    const status = await waitFor(async () => {
      const row = await db('agent_status').where({ node_id: nodeId }).first()
      return row && fromJson<string[]>(row.running_command_ids).includes(command.id) ? row : undefined
    }, 'running command listed in heartbeats')
    expect(status).toBeTruthy()

    release()
    const done = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.status === 'completed' ? c : undefined
    }, 'completion')
    expect(done.result).toEqual({ binary_version: '1.0.0' })
    expect(done.finished_at).not.toBeNull()
    expect(runner.executed).toEqual([command.id])
  })

  it('records a failure with its error and partial result', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    runner.handlers.set('upgrade', async () => {
      throw Object.assign(new Error('VerifyArtifact: checksum mismatch'), { result: { phase: 'rolled_back' } })
    })
    const { client } = agent(g.target, nodeId, token, runner)
    await client.start()
    const command = await enqueueCommand(db, { nodeId, type: 'upgrade', payload: { artifact: START.artifact } })
    const failed = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.status === 'failed' ? c : undefined
    }, 'failure')
    expect(failed.error).toBe('VerifyArtifact: checksum mismatch')
    expect(failed.result).toEqual({ phase: 'rolled_back' })
  })

  it('marks a stall after 5 checks without progress and the orchestrator fails the command at 20', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    runner.handlers.set('restore', () => new Promise(() => {}))
    const { client } = agent(g.target, nodeId, token, runner, { progressCheckIntervalMs: 15 })
    await client.start()
    const command = await enqueueCommand(db, { nodeId, type: 'restore', payload: { backup_id: 'b1', store_url: 'file:///tmp/backups', key: seal(new Uint8Array(32), new Uint8Array(32).fill(9)) } })

    const early = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.stall_count >= 1 && c.stall_count < 5 ? c : undefined
    }, 'first stall counts', 20_000, 5)
    expect(early.stalled).toBe(false)
    expect((await checkCommand(db, command.id)).status).toBe('running')
    const marked = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.stall_count >= 5 ? c : undefined
    }, 'stall mark')
    expect(marked.stalled).toBe(true)
    await waitFor(async () => (await getCommand(db, command.id)).stall_count >= 20, '20 stall counts')
    const failed = await checkCommand(db, command.id)
    expect(failed.status).toBe('failed')
    expect(failed.error).toMatch(/^stalled: no progress for \d+ checks \(limit 20\)/)
  })

  it('gives a reconnecting agent its pending commands from another gateway instance', async () => {
    const first = await gateway()
    const second = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    const a = agent(first.target, nodeId, token, runner)
    await a.client.start()
    await a.client.stop()
    await waitFor(async () => first.gateway.connectedNodes === 0, 'first gateway sees the agent leave')
    // The gateway writes the disconnect after it drops the stream from its count.
    await waitFor(async () => toDateOrNull((await findRegistration(db, nodeId))?.disconnected_at) !== null, 'the disconnect recorded')

    // Enqueued while the agent is away: nobody can deliver it yet.
    const command = await enqueueCommand(db, { nodeId, type: 'start', payload: {} })
    await new Promise((resolve) => setTimeout(resolve, 150))
    expect((await getCommand(db, command.id)).status).toBe('pending')

    const b = agent(second.target, nodeId, token, runner)
    await b.client.start()
    const done = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.status === 'completed' ? c : undefined
    }, 'completion through the second gateway')
    expect(done.gateway_id).toBe(second.gateway.gatewayId)
    expect((await findRegistration(db, nodeId))?.gateway_id).toBe(second.gateway.gatewayId)
  })

  it('an agent given two gateways loses the first mid-command, moves to the second, and finishes the command there once', async () => {
    const first = await gateway()
    const second = await gateway()
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    runner.handlers.set('configure', async (_cmd, report) => {
      report.progress('preparing', 'fetching artifact')
      await released
      return { binary_version: '1.1.0' }
    })
    const { client } = agent(`${first.target},${second.target}`, nodeId, token, runner, { progressCheckIntervalMs: 60_000 })
    await client.start()
    expect(client.target).toBe(first.target)
    const command = await enqueueCommand(db, { nodeId, type: 'configure', payload: START })
    await waitFor(async () => (await getCommand(db, command.id)).progress_phase === 'preparing', 'the command running through the first gateway')
    expect((await getCommand(db, command.id)).gateway_id).toBe(first.gateway.gatewayId)

    // The first gateway goes away with the command in flight.
    await first.stop()
    gateways = gateways.filter((x) => x !== first)
    await waitFor(async () => (await findRegistration(db, nodeId))?.gateway_id === second.gateway.gatewayId && client.connected, 'the agent on the second gateway')
    expect(client.target).toBe(second.target)

    release()
    const done = await waitFor(async () => {
      const c = await getCommand(db, command.id)
      return c.status === 'completed' ? c : undefined
    }, 'completion through the second gateway')
    expect(done.result).toEqual({ binary_version: '1.1.0' })
    // gateway_id stays the gateway that delivered it; the outcome arrived through the second.
    expect(runner.executed).toEqual([command.id])
    // Heartbeats flow through the second gateway.
    const before = toDateOrNull((await db('nodes').where({ id: nodeId }).first('last_heartbeat')).last_heartbeat)
    await waitFor(async () => (toDateOrNull((await db('nodes').where({ id: nodeId }).first('last_heartbeat')).last_heartbeat)?.getTime() ?? 0) > (before?.getTime() ?? 0), 'a heartbeat through the second gateway')
  })

  it('resends a command that was sent but never acknowledged, and the agent runs it once', async () => {
    const g = await gateway()
    const { nodeId, token } = await nodeWithToken()
    // Sent to a stream that dropped before the agent acknowledged it.
    const command = await enqueueCommand(db, { nodeId, type: 'stop', payload: {} })
    await db('agent_commands').where({ id: command.id }).update({ status: 'sent', gateway_id: 'gone-gateway', sent_at: new Date() })
    const runner = new ScriptedRunner()
    const { client } = agent(g.target, nodeId, token, runner)
    await client.start()
    await waitFor(async () => (await getCommand(db, command.id)).status === 'completed', 'completion after resend')
    expect(runner.executed).toEqual([command.id])
  })

  it('an agent whose report was lost re-reports the outcome when the command arrives again, without running it twice', async () => {
    const port = await freePort()
    const g = await gateway({}, port)
    const { nodeId, token } = await nodeWithToken()
    const runner = new ScriptedRunner()
    const { client } = agent(g.target, nodeId, token, runner)
    await client.start()
    const command = await enqueueCommand(db, { nodeId, type: 'restart', payload: {} })
    await waitFor(async () => (await getCommand(db, command.id)).status === 'completed', 'completion')
    // As if the completion had been lost with the gateway: a new instance on the same address resends it.
    await db('agent_commands').where({ id: command.id }).update({ status: 'running', result: null, finished_at: null })
    await g.stop()
    gateways = gateways.filter((x) => x !== g)
    await gateway({}, port)
    await waitFor(async () => (await getCommand(db, command.id)).status === 'completed', 'completion re-reported after reconnect')
    expect(runner.executed).toEqual([command.id])
  })

  it('rejects an agent report for another node\'s command', async () => {
    const g = await gateway()
    const mine = await nodeWithToken()
    const theirs = await nodeWithToken()
    const command = await enqueueCommand(db, { nodeId: theirs.nodeId, type: 'start', payload: {} })
    const runner = new ScriptedRunner()
    const { client } = agent(g.target, mine.nodeId, mine.token, runner)
    await client.start()
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(runner.executed).toEqual([])
    expect((await getCommand(db, command.id)).status).toBe('pending')
  })
})
