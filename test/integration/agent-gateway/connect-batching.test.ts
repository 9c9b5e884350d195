/**
 * The gateway sets streams up and writes their disconnects in batches (src/agent-gateway/gateway.ts:
 * one token check, one connect record and one command read per batch of up to 500, one batch at
 * a time). What an operator would notice if that went wrong: a storm of reconnecting agents on a
 * small pool is not all accepted, a refused agent spoils its batch, a node shows disconnected
 * while its agent is connected, or a gateway shut down mid-setup leaves streams recorded open.
 *
 * The agents here are raw Connect streams (as bench/fleet-load.ts opens them): a full agent
 * client per node would cost a Register call and timers each, and the storm is about Connect.
 */
import crypto from 'node:crypto'
import * as grpc from '@grpc/grpc-js'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { enqueueCommand } from '../../../src/agent-gateway/commands.js'
import { agentGatewayService, agentMetadata, type AgentMessageOut, type GatewayMessage } from '../../../src/agent-gateway/grpc.js'
import { findRegistration, recordRegistration } from '../../../src/agent-gateway/registrations.js'
import { AGENT_TOKEN_PREFIX, createAgentToken } from '../../../src/agent-gateway/tokens.js'
import type { AgentGatewayOptions } from '../../../src/agent-gateway/gateway.js'
import { createDatabase, type Db } from '../../../src/db/knex.js'
import { toDateOrNull } from '../../../src/db/dialect.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'
import { devTls, startGateway, type RunningGateway } from './harness.js'

type Channel = grpc.Client & { Connect(metadata: grpc.Metadata): grpc.ClientDuplexStream<AgentMessageOut, GatewayMessage> }
type Opened = { accepted: true } | { accepted: false; code: grpc.status; details: string }

/** The gateway id the fleet registered through before the storm (as after a gateway restart). */
const EARLIER_GATEWAY = 'gateway-before-restart'
/** The gateway's own pool on Postgres: small, so a per-stream statement storm would starve it. */
const GATEWAY_POOL_MAX = 3

/** A node agent reduced to its stream: acknowledges and completes each command the first time it sees it. */
class RawAgent {
  /** Command ids as they arrived on the wire (a resend shows twice). */
  readonly deliveries: string[] = []
  /** Command ids the agent ran (it deduplicates by id, as the real agent does). */
  readonly ran: string[] = []
  readonly opened: Promise<Opened>
  /** Resolves when the call ends with any status (the server ended or refused it). */
  readonly ended: Promise<grpc.StatusObject>
  readonly stream: grpc.ClientDuplexStream<AgentMessageOut, GatewayMessage>

  constructor(
    channel: Channel,
    readonly nodeId: string,
    token: string,
  ) {
    this.stream = channel.Connect(agentMetadata(nodeId, token))
    this.opened = new Promise((resolve) => {
      this.stream.once('metadata', () => resolve({ accepted: true }))
      this.stream.on('error', (err: grpc.ServiceError) => resolve({ accepted: false, code: err.code, details: err.details }))
    })
    this.ended = new Promise((resolve) => this.stream.once('status', resolve))
    this.stream.on('data', (message: GatewayMessage) => {
      if (message.body !== 'command') return
      const id = message.command.command_id
      this.deliveries.push(id)
      if (this.ran.includes(id)) return
      this.ran.push(id)
      this.stream.write({ ack: { command_id: id } })
      this.stream.write({ completed: { command_id: id, result_json: JSON.stringify({ node: this.nodeId }) } })
    })
  }

  heartbeat(): void {
    this.stream.write({
      heartbeat: {
        sent_at_unix_ms: Date.now(),
        agent_version: '0.1.0-test',
        binary_version: '1.0.0',
        running_command_ids: [],
        sync_status: 'syncing',
        metrics: { block_height: 7 },
        process_state: 'running',
        restarts_in_window: 0,
      },
    })
  }
}

describe.each(DIALECTS)('agent-gateway connect batching on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  /** The gateways' pool, apart from the one the test reads and sets up with (as a gateway daemon has its own). */
  let gatewayDb: Db
  let gateways: RunningGateway[] = []
  let channels: Channel[] = []
  let agents: RawAgent[] = []

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    // SQLite pools always have one connection.
    gatewayDb = dialect === 'postgres' ? createDatabase(t.url, { poolMax: GATEWAY_POOL_MAX }) : t.connect()
  })
  afterEach(async () => {
    for (const a of agents) a.stream.cancel()
    for (const c of channels) c.close()
    await Promise.all(gateways.map((g) => g.stop()))
    agents = []
    channels = []
    gateways = []
  })
  afterAll(async () => {
    if (dialect === 'postgres') await gatewayDb.destroy()
    await t.destroy()
  })

  async function gateway(overrides: Partial<AgentGatewayOptions> = {}): Promise<RunningGateway> {
    const g = await startGateway(gatewayDb, overrides)
    gateways.push(g)
    return g
  }

  /** A few HTTP/2 connections to the gateway, which the agents' streams share round-robin. */
  function channelsTo(g: RunningGateway, count = 3): Channel[] {
    const Service = agentGatewayService()
    const opened = Array.from({ length: count }, () => new Service(g.target, grpc.credentials.createSsl(devTls().ca)) as unknown as Channel)
    channels.push(...opened)
    return opened
  }

  function open(via: Channel[], nodeId: string, token: string, i = 0): RawAgent {
    const a = new RawAgent(via[i % via.length]!, nodeId, token)
    agents.push(a)
    return a
  }

  /** Nodes with a token and a registration through an earlier gateway, not connected anywhere. */
  async function fleet(count: number): Promise<{ nodeId: string; token: string }[]> {
    const out: { nodeId: string; token: string }[] = []
    for (let i = 0; i < count; i += 25) {
      out.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(25, count - i) }, async () => {
            const node = await insertTestNode(db)
            const token = await createAgentToken(db, node.id)
            await recordRegistration(db, { nodeId: node.id, agentVersion: '0.1.0-test', binaryVersion: '1.0.0', hostname: 'host', publicKey: 'AAAA', gatewayId: EARLIER_GATEWAY })
            return { nodeId: node.id, token }
          }),
        )),
      )
    }
    return out
  }

  async function registrations(nodeIds: string[]): Promise<Map<string, { gateway_id: string; connected_at: Date | null; disconnected_at: Date | null }>> {
    const rows = (await db('agent_registrations').whereIn('node_id', nodeIds).select('node_id', 'gateway_id', 'connected_at', 'disconnected_at')) as Record<string, unknown>[]
    return new Map(rows.map((r) => [String(r.node_id), { gateway_id: String(r.gateway_id), connected_at: toDateOrNull(r.connected_at), disconnected_at: toDateOrNull(r.disconnected_at) }]))
  }

  async function commandStatuses(ids: string[]): Promise<Map<string, { status: string; gateway_id: string | null }>> {
    const rows = (await db('agent_commands').whereIn('id', ids).select('id', 'status', 'gateway_id')) as { id: string; status: string; gateway_id: string | null }[]
    return new Map(rows.map((r) => [String(r.id), { status: r.status, gateway_id: r.gateway_id }]))
  }

  async function heartbeated(nodeIds: string[]): Promise<Set<string>> {
    const rows = (await db('agent_status').whereIn('node_id', nodeIds).select('node_id')) as { node_id: string }[]
    const beats = (await db('nodes').whereIn('id', nodeIds).whereNotNull('last_heartbeat').select('id')) as { id: string }[]
    const withBeat = new Set(beats.map((b) => String(b.id)))
    return new Set(rows.map((r) => String(r.node_id)).filter((id) => withBeat.has(id)))
  }

  /**
   * Holds every connection of the gateway's pool, so the gateway's next statement waits:
   * returns the release. Only the holds run until the gateway asks for a connection.
   */
  async function holdGatewayPool(): Promise<() => Promise<void>> {
    const max = (gatewayDb.client as { config: { pool?: { max?: number } } }).config.pool?.max ?? 1
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const acquired: Promise<void>[] = []
    const held: Promise<unknown>[] = []
    for (let i = 0; i < max; i++) {
      let signal!: () => void
      acquired.push(new Promise<void>((resolve) => (signal = resolve)))
      held.push(
        gatewayDb.transaction(async (trx) => {
          await trx.raw('select 1')
          signal()
          await gate
        }),
      )
    }
    await Promise.all(acquired)
    return async () => {
      release()
      await Promise.all(held)
    }
  }

  /** The gateway waits for a connection from its pool (a statement of the batch it is setting up). */
  async function gatewayWaitsForPool(): Promise<void> {
    const pool = (gatewayDb.client as { pool?: { numPendingAcquires(): number } }).pool
    await waitFor(async () => (pool?.numPendingAcquires() ?? 0) >= 1, 'the gateway to wait for a pool connection', 10_000, 5)
  }

  /** Gateway timers that would take pool connections on their own: off, for the tests that hold the pool. */
  const quietTimers = { heartbeatFlushIntervalMs: 60_000, commandPollIntervalMs: 60_000 }

  it('a storm of 150 agents connecting at once over a small pool: all accepted, connected there, each command delivered once, every heartbeat written', async () => {
    const nodes = await fleet(150)
    const commands = new Map<string, string>()
    for (const { nodeId } of nodes) commands.set(nodeId, (await enqueueCommand(db, { nodeId, type: 'restart', payload: {} })).id)
    const g = await gateway()
    const via = channelsTo(g)

    // All in one turn of the event loop: the gateway sees them arrive together.
    const storm = nodes.map(({ nodeId, token }, i) => open(via, nodeId, token, i))
    const outcomes = await Promise.all(storm.map((a) => a.opened))
    expect(outcomes.filter((o) => !o.accepted)).toEqual([])
    for (const a of storm) a.heartbeat()

    const ids = nodes.map((n) => n.nodeId)
    await waitFor(async () => (await heartbeated(ids)).size === ids.length, 'a heartbeat from every agent written')
    const done = await waitFor(async () => {
      const statuses = await commandStatuses([...commands.values()])
      return [...statuses.values()].every((c) => c.status === 'completed') ? statuses : undefined
    }, 'every command completed')
    for (const c of done.values()) expect(c.gateway_id).toBe(g.gateway.gatewayId)

    for (const a of storm) {
      // Its own command only, once on the wire: the gateway neither resent it nor sent another node's.
      expect(a.deliveries).toEqual([commands.get(a.nodeId)])
    }
    const recorded = await registrations(ids)
    for (const id of ids) {
      expect(recorded.get(id)).toMatchObject({ gateway_id: g.gateway.gatewayId, disconnected_at: null })
      expect(recorded.get(id)?.connected_at).not.toBeNull()
    }
    expect(g.gateway.connectedNodes).toBe(150)
  })

  it('refuses a wrong token, another node\'s token, an unknown node and a terminated node in the same batch as agents it accepts, and writes nothing for them', async () => {
    const nodes = await fleet(40)
    const [wrong, crossed, terminated, ...good] = nodes as [(typeof nodes)[number], (typeof nodes)[number], (typeof nodes)[number], ...typeof nodes]
    await setNodeState(db, terminated.nodeId, 'terminated')
    const commands = new Map<string, string>()
    for (const { nodeId } of nodes) commands.set(nodeId, (await enqueueCommand(db, { nodeId, type: 'stop', payload: {} })).id)
    const before = await registrations(nodes.map((n) => n.nodeId))
    const g = await gateway()
    const via = channelsTo(g)

    const accepted = good.map(({ nodeId, token }, i) => open(via, nodeId, token, i))
    const wrongToken = open(via, wrong.nodeId, AGENT_TOKEN_PREFIX + crypto.randomBytes(32).toString('base64url'))
    // The crossed node presents a token of a node that is itself connecting in this batch.
    const othersToken = open(via, crossed.nodeId, good[0]!.token)
    const unknownNode = open(via, crypto.randomUUID(), good[1]!.token)
    const retired = open(via, terminated.nodeId, terminated.token)
    const malformed = open(via, good[2]!.nodeId, 'not-a-token')

    for (const refused of [wrongToken, othersToken, unknownNode, malformed]) {
      expect(await refused.opened).toMatchObject({ accepted: false, code: grpc.status.UNAUTHENTICATED, details: expect.stringMatching(/^agent token refused/) })
    }
    expect(await retired.opened).toMatchObject({ accepted: false, code: grpc.status.FAILED_PRECONDITION, details: expect.stringMatching(/is terminated/) })
    const outcomes = await Promise.all(accepted.map((a) => a.opened))
    expect(outcomes.filter((o) => !o.accepted)).toEqual([])
    for (const a of accepted) a.heartbeat()

    const goodIds = good.map((n) => n.nodeId)
    await waitFor(async () => (await heartbeated(goodIds)).size === goodIds.length, 'a heartbeat from every accepted agent written')
    await waitFor(async () => [...(await commandStatuses(goodIds.map((id) => commands.get(id)!))).values()].every((c) => c.status === 'completed'), 'the accepted agents\' commands completed')
    const after = await registrations(nodes.map((n) => n.nodeId))
    for (const id of goodIds) expect(after.get(id)).toMatchObject({ gateway_id: g.gateway.gatewayId, disconnected_at: null })

    // Refused: registration as it was, command never sent, no status, nothing delivered.
    const refusedIds = [wrong.nodeId, crossed.nodeId, terminated.nodeId]
    for (const id of refusedIds) expect(after.get(id)).toEqual(before.get(id))
    for (const [id, c] of await commandStatuses(refusedIds.map((n) => commands.get(n)!))) expect(c, id).toMatchObject({ status: 'pending', gateway_id: null })
    expect(await heartbeated(refusedIds)).toEqual(new Set())
    expect(await db('agent_status').whereIn('node_id', refusedIds)).toEqual([])
    for (const a of [wrongToken, othersToken, unknownNode, retired, malformed]) expect(a.deliveries).toEqual([])
    expect(g.gateway.connectedNodes).toBe(good.length)
  })

  it('an agent that drops its stream and reconnects at once to the same gateway stays recorded as connected', async () => {
    const [node, marker] = await fleet(2)
    const g = await gateway()
    const via = channelsTo(g, 1)
    const first = open(via, node!.nodeId, node!.token)
    expect(await first.opened).toEqual({ accepted: true })
    const connected = (await findRegistration(db, node!.nodeId))?.connected_at
    expect(connected).not.toBeNull()

    // Closes and reopens in the same turn: the gateway queues the disconnect and the new stream together.
    first.stream.end()
    const second = open(via, node!.nodeId, node!.token)
    expect(await second.opened).toEqual({ accepted: true })
    // The gateway has handled the first stream's end (it answers the end with its status)...
    await first.ended
    // ...and a stream set up after it is written after its disconnect (one batch at a time, in order).
    expect(await open(via, marker!.nodeId, marker!.token).opened).toEqual({ accepted: true })

    const registration = await findRegistration(db, node!.nodeId)
    expect(registration).toMatchObject({ gateway_id: g.gateway.gatewayId, disconnected_at: null })
    expect(registration!.connected_at!.getTime()).toBeGreaterThanOrEqual(connected!.getTime())
    expect(g.gateway.connectedNodes).toBe(2)
  })

  it('an old stream that closes while the agent\'s new stream is being set up does not mark the node disconnected', async () => {
    const [node, marker] = await fleet(2)
    const g = await gateway(quietTimers)
    const via = channelsTo(g, 1)
    const old = open(via, node!.nodeId, node!.token)
    expect(await old.opened).toEqual({ accepted: true })

    // The agent opens a new stream (a new connection after a network blip) before the old one's
    // close reaches the gateway; the close arrives while the new stream waits for its token check.
    const release = await holdGatewayPool()
    let renewed: RawAgent
    try {
      renewed = open(via, node!.nodeId, node!.token)
      await gatewayWaitsForPool()
      old.stream.cancel()
      await waitFor(async () => g.gateway.connectedNodes === 0, 'the gateway to drop the old stream')
    } finally {
      await release()
    }
    expect(await renewed.opened).toEqual({ accepted: true })
    // Set up after the batch holding the new stream, so after any disconnect queued behind it.
    expect(await open(via, marker!.nodeId, marker!.token).opened).toEqual({ accepted: true })

    expect(await findRegistration(db, node!.nodeId)).toMatchObject({ gateway_id: g.gateway.gatewayId, disconnected_at: null })
    expect(g.gateway.connectedNodes).toBe(2)
  })

  it('an agent that moves to a second gateway ends recorded on that gateway, whatever the first writes for its old stream', async () => {
    const [node, marker] = await fleet(2)
    const first = await gateway()
    const second = await gateway()
    const toFirst = channelsTo(first, 1)
    const toSecond = channelsTo(second, 1)
    const old = open(toFirst, node!.nodeId, node!.token)
    expect(await old.opened).toEqual({ accepted: true })
    expect((await findRegistration(db, node!.nodeId))?.gateway_id).toBe(first.gateway.gatewayId)

    old.stream.end()
    const moved = open(toSecond, node!.nodeId, node!.token)
    expect(await moved.opened).toEqual({ accepted: true })
    await old.ended
    // The first gateway has written what it queued for the old stream once it sets up a later one.
    expect(await open(toFirst, marker!.nodeId, marker!.token).opened).toEqual({ accepted: true })

    expect(await findRegistration(db, node!.nodeId)).toMatchObject({ gateway_id: second.gateway.gatewayId, disconnected_at: null })
    expect(first.gateway.connectedNodes).toBe(1)
    expect(second.gateway.connectedNodes).toBe(1)
  })

  it('a gateway closed while streams are being set up refuses them, closes the open ones, and records every disconnect', async () => {
    const nodes = await fleet(60)
    const established = nodes.slice(0, 30)
    const settingUp = nodes.slice(30)
    const g = await gateway(quietTimers)
    const via = channelsTo(g)
    const open1 = established.map(({ nodeId, token }, i) => open(via, nodeId, token, i))
    expect((await Promise.all(open1.map((a) => a.opened))).filter((o) => !o.accepted)).toEqual([])

    const release = await holdGatewayPool()
    let closed: Promise<void>
    let open2: RawAgent[]
    try {
      open2 = settingUp.map(({ nodeId, token }, i) => open(via, nodeId, token, i))
      await gatewayWaitsForPool()
      closed = g.stop()
    } finally {
      await release()
    }
    await closed
    gateways = gateways.filter((x) => x !== g)

    // Not one of those being set up was accepted: each got an error status instead of headers.
    for (const o of await Promise.all(open2.map((a) => a.opened))) {
      expect(o.accepted).toBe(false)
      if (!o.accepted) expect([grpc.status.UNAVAILABLE, grpc.status.CANCELLED]).toContain(o.code)
    }
    // The open streams were ended by the gateway.
    await Promise.all(open1.map((a) => a.ended))

    const recorded = await registrations(nodes.map((n) => n.nodeId))
    for (const { nodeId } of established) {
      const r = recorded.get(nodeId)!
      expect(r.gateway_id, nodeId).toBe(g.gateway.gatewayId)
      expect(r.disconnected_at, `disconnect of ${nodeId}`).not.toBeNull()
      expect(r.disconnected_at!.getTime()).toBeGreaterThanOrEqual(r.connected_at!.getTime())
    }
    for (const { nodeId } of settingUp) expect(recorded.get(nodeId)).toMatchObject({ gateway_id: EARLIER_GATEWAY, connected_at: null })
  })
})
