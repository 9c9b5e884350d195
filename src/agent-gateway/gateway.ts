/**
 * The gateway side of the agent protocol (proto/agent.proto): authenticates agents, keeps one
 * stream per connected node, batches heartbeats, forwards sync changes to the health state
 * machine, records command reports, and delivers commands the orchestrator left in the database.
 */
import os from 'node:os'
import crypto from 'node:crypto'
import * as grpc from '@grpc/grpc-js'
import type { ArtifactBlobStore } from '../artifacts/blob-store.js'
import { fetchArtifactHandler } from '../artifacts/gateway-fetch.js'
import type { Db } from '../db/knex.js'
import { isDomainError, UnauthorizedError } from '../errors.js'
import type { Logger } from '../log.js'
import { applyHealthUpdate } from '../nodes/health-state-machine.js'
import { SYNC_STATUSES, TERMINAL_NODE_STATES, type SyncStatus } from '../nodes/states.js'
import {
  claimForDelivery,
  findPendingCommands,
  listUnfinishedCommandsOf,
  markResent,
  recordAck,
  recordCompletion,
  recordFailure,
  recordProgress,
  type AgentCommand,
} from './commands.js'
import {
  agentGatewayService,
  readAgentCredentials,
  type AgentMessage,
  type GatewayMessage,
  type HeartbeatMessage,
  type RegisterRequest,
  type RegisterResponse,
} from './grpc.js'
import { admitSyncChange, type SyncChangeDecision, type SyncChangeLimit } from '../health/sync-flapping.js'
import { PRESENCE_LAPSE_INTERVALS, pruneGatewayPresence, recordGatewayPresence } from './gateway-presence.js'
import { HeartbeatBatcher } from './heartbeats.js'
import { PROCESS_STATES, STREAM_TOKEN_RECHECK_MS } from './protocol.js'
import { markManyConnected, markManyDisconnected, recordRegistration } from './registrations.js'
import { authenticateAgent, authenticateAgents, isRetiredNode, type AuthenticatedAgent } from './tokens.js'

export interface AgentGatewayOptions {
  db: Db
  logger: Logger
  /** Names this instance in the database (which gateway holds which stream). */
  gatewayId?: string
  heartbeatIntervalSeconds: number
  progressCheckIntervalSeconds: number
  heartbeatFlushIntervalMs: number
  commandPollIntervalMs: number
  now?: () => Date
  /** The artifact store FetchArtifact serves from (docs/artifacts.md); absent: every fetch is "artifact not found". */
  artifacts?: ArtifactBlobStore
  onHeartbeatsFlushed?: (latenciesMs: Float64Array) => void
  /**
   * How often this gateway records that it is receiving (gateway-presence.ts); default the
   * agents' heartbeat interval.
   */
  presenceIntervalMs?: number
  /** Sync changes admitted per node and window (docs/health.md, "Sync flapping"). */
  syncChangeLimit?: SyncChangeLimit
  /** How often open streams' tokens are checked again (default STREAM_TOKEN_RECHECK_MS; tests). */
  tokenRecheckMs?: number
}

type Stream = grpc.ServerDuplexStream<AgentMessage, GatewayMessage>

interface Session {
  nodeId: string
  call: Stream
  /**
   * What this stream's agent last reported, so only changes reach the state machine; at first the
   * node's recorded value when the stream was set up. Null: compare the next report with the
   * database (reconcileSync sets it when something else, e.g. an older stream's late write, changed
   * the recorded value since).
   */
  syncStatus: SyncStatus | null
  /** Until then (epoch ms) the node's sync changes are held back: it flapped (sync-flapping.ts). */
  syncHeldUntil?: number
  /** Reports are written in arrival order (an ack before the completion it precedes). */
  queue: Promise<void>
  /**
   * Set once the stream is recorded connected and sent what was unfinished: until then the
   * command poll leaves the node alone, or a command it claimed meanwhile went out twice.
   */
  ready: boolean
}

/** Commands created within this window are looked at on every poll; older ones by a sweep. */
const RECENT_WINDOW_MS = 60_000
const SWEEP_EVERY_POLLS = 40
const POLL_LIMIT = 1_000
const SWEEP_LIMIT = 10_000
const MAX_REPORT_BYTES = 1_000_000
/** Streams set up together: their token checks, connect records and command reads in one statement each. */
const OPEN_BATCH = 500

export class AgentGateway {
  readonly gatewayId: string
  readonly heartbeats: HeartbeatBatcher
  private readonly server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 })
  private readonly sessions = new Map<string, Session>()
  private readonly now: () => Date
  private pollTimer: NodeJS.Timeout | undefined
  private presenceTimer: NodeJS.Timeout | undefined
  private recheckTimer: NodeJS.Timeout | undefined
  private rechecking = false
  private startedAt: Date | undefined
  private polls = 0
  private polling = false
  private closed = false
  /**
   * Report writes (a statement per ack, progress and outcome, a transaction per sync change) may
   * hold all but two of the pool's connections: a rollout batch's burst of reports no longer
   * queues the heartbeat batches and the command poll behind it in the pool.
   */
  private readonly reportSlots: Slots
  /**
   * Streams opening and closing wait here and are written in batches, one batch at a time, in
   * order (a disconnect queued before a reconnect is written first). Per stream, setting up cost
   * four statements and a closing one more: 10,000 agents reconnecting at once (a gateway
   * restart, a network cut) queued 40,000 statements on the gateway's pool ahead of the
   * heartbeat batches, which all but stopped for a minute (bench/fleet-load.ts). Now a batch of
   * up to 500 streams costs about five statements and holds one connection at a time.
   */
  private opening: Stream[] = []
  private closing = new Set<string>()
  private linking: Promise<void> | undefined

  constructor(private readonly options: AgentGatewayOptions) {
    this.gatewayId = options.gatewayId ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString('hex')}`
    this.now = options.now ?? (() => new Date())
    const poolMax = (options.db.client as { config?: { pool?: { max?: number } } }).config?.pool?.max ?? 10
    this.reportSlots = new Slots(Math.max(1, poolMax - 2))
    this.heartbeats = new HeartbeatBatcher({
      db: options.db,
      logger: options.logger,
      flushIntervalMs: options.heartbeatFlushIntervalMs,
      ...(options.onHeartbeatsFlushed ? { onFlushed: options.onHeartbeatsFlushed } : {}),
    })
    this.server.addService(agentGatewayService().service, {
      Register: (call: grpc.ServerUnaryCall<RegisterRequest, RegisterResponse>, callback: grpc.sendUnaryData<RegisterResponse>) =>
        void this.register(call, callback),
      Connect: (call: Stream) => void this.connect(call),
      FetchArtifact: fetchArtifactHandler({
        db: options.db,
        blobs: options.artifacts,
        logger: options.logger,
        authenticate: (metadata) => this.authenticate(metadata),
        toStatus: (err, call) => this.toStatus(err, call),
      }),
    })
  }

  get connectedNodes(): number {
    return this.sessions.size
  }

  /** Binds and starts serving; returns the bound port (useful with port 0). */
  async listen(host: string, port: number, credentials: grpc.ServerCredentials): Promise<number> {
    const bound = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, credentials, (err, p) => (err ? reject(err) : resolve(p))),
    )
    this.heartbeats.start()
    this.pollTimer = setInterval(() => void this.deliverPending(), this.options.commandPollIntervalMs)
    this.pollTimer.unref()
    this.startedAt = this.now()
    const presenceMs = this.options.presenceIntervalMs ?? this.options.heartbeatIntervalSeconds * 1_000
    await this.recordPresence(presenceMs)
    await pruneGatewayPresence(this.options.db, this.now()).catch((err: unknown) => this.options.logger.warn({ err }, 'could not prune lapsed gateway presence rows'))
    this.presenceTimer = setInterval(() => void this.recordPresence(presenceMs), presenceMs)
    this.presenceTimer.unref()
    this.recheckTimer = setInterval(() => void this.recheckTokens(), this.options.tokenRecheckMs ?? STREAM_TOKEN_RECHECK_MS)
    this.recheckTimer.unref()
    return bound
  }

  /**
   * Fencing: a token is checked when a stream opens, and the stream then lives on. A migration
   * replaces the token while the old host's stream may still be open (here or on another
   * gateway): every open stream's token is checked again, and a refused one is closed with the
   * refusal, which tells its agent it was superseded (and ends the acknowledgement of its heartbeats).
   */
  private async recheckTokens(): Promise<void> {
    if (this.rechecking || this.closed) return
    this.rechecking = true
    try {
      const sessions = [...this.sessions.values()].filter((s) => s.ready)
      for (let i = 0; i < sessions.length; i += OPEN_BATCH) {
        const batch = sessions.slice(i, i + OPEN_BATCH)
        const agents = await authenticateAgents(this.options.db, batch.map((s) => readAgentCredentials(s.call.metadata)))
        for (const [j, session] of batch.entries()) {
          const agent = agents[j]!
          const refusal =
            agent instanceof UnauthorizedError
              ? { code: grpc.status.UNAUTHENTICATED, details: `${agent.message}: ${agent.details ?? ''}`.trim() }
              : isRetiredNode(agent)
                ? { code: grpc.status.FAILED_PRECONDITION, details: `node ${agent.nodeId} is ${agent.state}; its agent should stop` }
                : undefined
          if (!refusal || this.sessions.get(session.nodeId) !== session) continue
          this.options.logger.warn({ node_id: session.nodeId, code: grpc.status[refusal.code] }, 'closing an agent stream whose token is no longer valid')
          // The stream's error handler closes the session (and records the disconnect).
          session.call.emit('error', refusal)
        }
      }
      await this.reconcileSync().catch((err: unknown) => this.options.logger.warn({ err }, 'could not compare the connected nodes\' sync_status with their agents\' reports; retrying'))
    } catch (err) {
      this.options.logger.warn({ err }, 'could not check the open streams\' tokens again; retrying')
    } finally {
      this.rechecking = false
    }
  }

  /**
   * A node whose recorded sync_status differs from what its agent, connected here, keeps
   * reporting (agent_status): something else wrote it after this stream's last change (an old
   * stream's late write, another gateway). Forgetting the stream's last report makes the next
   * heartbeat compare with the database and write the agent's value again. One query per recheck.
   */
  private async reconcileSync(): Promise<void> {
    if (this.sessions.size === 0) return
    const rows = (await this.options.db('agent_status as a')
      .join('nodes as n', 'n.id', 'a.node_id')
      .join('agent_registrations as r', 'r.node_id', 'a.node_id')
      .where('r.gateway_id', this.gatewayId)
      .whereNull('r.disconnected_at')
      .whereNotIn('n.state', TERMINAL_NODE_STATES)
      .whereRaw('a.sync_status <> n.sync_status')
      .select('a.node_id', 'a.sync_status')) as Array<{ node_id: string; sync_status: string }>
    const now = this.now().getTime()
    for (const row of rows) {
      const session = this.sessions.get(row.node_id)
      if (session?.ready && session.syncStatus === row.sync_status && !((session.syncHeldUntil ?? 0) > now)) session.syncStatus = null
    }
  }

  /** Tells the heartbeat evaluation that heartbeats can reach the control plane (gateway-presence.ts). */
  private async recordPresence(presenceMs: number, liveUntil?: Date): Promise<void> {
    if (!this.startedAt) return
    const until = liveUntil ?? new Date(this.now().getTime() + PRESENCE_LAPSE_INTERVALS * presenceMs)
    await recordGatewayPresence(this.options.db, this.gatewayId, this.startedAt, until).catch((err: unknown) =>
      this.options.logger.warn({ err }, 'could not record this gateway as receiving heartbeats; retrying'),
    )
  }

  /** Stops accepting calls, ends every stream (agents reconnect elsewhere), flushes heartbeats. */
  async close(graceMs = 2_000): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.pollTimer) clearInterval(this.pollTimer)
    if (this.presenceTimer) clearInterval(this.presenceTimer)
    if (this.recheckTimer) clearInterval(this.recheckTimer)
    for (const session of this.sessions.values()) session.call.end()
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown()
        resolve()
      }, graceMs)
      this.server.tryShutdown(() => {
        clearTimeout(timer)
        resolve()
      })
    })
    await Promise.all([...this.sessions.values()].map((s) => s.queue))
    this.sessions.clear()
    // Streams still being set up are refused, and every disconnect is written, before the database goes.
    while (this.linking) await this.linking
    await this.heartbeats.stop()
    // From here no heartbeat is received: the evaluation must not count this gateway as present.
    await this.recordPresence(0, this.now())
  }

  private async authenticate(metadata: grpc.Metadata): Promise<AuthenticatedAgent> {
    const { nodeId, token } = readAgentCredentials(metadata)
    const agent = await authenticateAgent(this.options.db, nodeId, token)
    if (isRetiredNode(agent)) {
      throw Object.assign(new Error(`node ${agent.nodeId} is ${agent.state}; its agent should stop`), { code: grpc.status.FAILED_PRECONDITION })
    }
    return agent
  }

  private async register(call: grpc.ServerUnaryCall<RegisterRequest, RegisterResponse>, callback: grpc.sendUnaryData<RegisterResponse>): Promise<void> {
    try {
      const agent = await this.authenticate(call.metadata)
      const request = call.request
      if (!Buffer.isBuffer(request.agent_public_key) || request.agent_public_key.length !== 32) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: 'agent_public_key must be a 32-byte X25519 public key' })
        return
      }
      if (!request.agent_version || request.agent_version.length > 64 || request.binary_version.length > 64 || request.hostname.length > 255) {
        callback({ code: grpc.status.INVALID_ARGUMENT, details: 'agent_version is required; versions are at most 64 characters, hostname 255' })
        return
      }
      await recordRegistration(
        this.options.db,
        {
          nodeId: agent.nodeId,
          agentVersion: request.agent_version,
          binaryVersion: request.binary_version || null,
          hostname: request.hostname || 'unknown',
          publicKey: request.agent_public_key.toString('base64'),
          gatewayId: this.gatewayId,
        },
        this.now(),
      )
      this.options.logger.info({ node_id: agent.nodeId, agent_version: request.agent_version }, 'agent registered')
      callback(null, {
        node_id: agent.nodeId,
        heartbeat_interval_seconds: this.options.heartbeatIntervalSeconds,
        progress_check_interval_seconds: this.options.progressCheckIntervalSeconds,
      })
    } catch (err) {
      callback(this.toStatus(err, 'Register'))
    }
  }

  private connect(call: Stream): void {
    this.opening.push(call)
    this.link()
  }

  /** Writes the waiting disconnects and sets up the waiting streams, batch after batch, until none wait. */
  private link(): void {
    if (this.linking) return
    this.linking = (async () => {
      try {
        // Streams that arrive in the same turn of the event loop share the first batch.
        await new Promise((resolve) => setImmediate(resolve))
        while (this.closing.size > 0 || this.opening.length > 0) {
          if (this.closing.size > 0) {
            // A node whose agent has a newer stream here (it reconnected before its old stream's
            // close arrived, and that stream's batch is written) is connected: its old disconnect is not.
            const closed = [...this.closing].filter((nodeId) => !this.sessions.has(nodeId))
            this.closing = new Set()
            if (closed.length > 0) {
              await markManyDisconnected(this.options.db, closed, this.gatewayId, this.now()).catch((err: unknown) =>
                this.options.logger.warn({ err, nodes: closed.length }, 'could not record the agent disconnects'),
              )
            }
          }
          if (this.opening.length > 0) await this.openStreams(this.opening.splice(0, OPEN_BATCH))
        }
      } finally {
        this.linking = undefined
      }
    })()
  }

  private async openStreams(calls: Stream[]): Promise<void> {
    let agents: Awaited<ReturnType<typeof authenticateAgents>>
    try {
      agents = await authenticateAgents(this.options.db, calls.map((call) => readAgentCredentials(call.metadata)))
    } catch (err) {
      const status = this.toStatus(err, 'Connect')
      for (const call of calls) call.emit('error', status)
      return
    }
    const opened: Session[] = []
    for (const [i, call] of calls.entries()) {
      const agent = agents[i]!
      if (agent instanceof UnauthorizedError) {
        call.emit('error', this.toStatus(agent, 'Connect'))
        continue
      }
      if (isRetiredNode(agent)) {
        call.emit('error', { code: grpc.status.FAILED_PRECONDITION, details: `node ${agent.nodeId} is ${agent.state}; its agent should stop` })
        continue
      }
      if (this.closed) {
        call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'gateway is shutting down' })
        continue
      }
      // The agent gave up while it waited (its 'cancelled' came before there was a session to close).
      if (call.cancelled) continue
      opened.push(this.openSession(agent.nodeId, call, agent.syncStatus))
    }
    // A node that opened two streams in one batch keeps the later one.
    const current = opened.filter((session) => this.sessions.get(session.nodeId) === session)
    if (current.length === 0) return
    try {
      const nodeIds = current.map((session) => session.nodeId)
      const now = this.now()
      await markManyConnected(this.options.db, nodeIds, this.gatewayId, now)
      // Headers tell the agent the stream is accepted before any command flows.
      for (const session of current) session.call.sendMetadata(new grpc.Metadata())
      // Everything not finished is (re)sent: the agent deduplicates by command id.
      const unfinished = await listUnfinishedCommandsOf(this.options.db, nodeIds)
      const resent = [...unfinished.values()].flat().filter((c) => c.status !== 'running').map((c) => c.id)
      for (let i = 0; i < resent.length; i += OPEN_BATCH) await markResent(this.options.db, resent.slice(i, i + OPEN_BATCH), this.gatewayId, now)
      for (const session of current) {
        for (const command of unfinished.get(session.nodeId) ?? []) this.send(session, command)
        session.ready = true
        this.options.logger.info({ node_id: session.nodeId }, 'agent connected')
      }
    } catch (err) {
      this.options.logger.error({ err, nodes: current.length }, 'could not set up the agent streams')
      for (const session of current) session.call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'gateway cannot reach its database; reconnect' })
    }
  }

  /**
   * `recorded`: the node's sync_status as this batch read it. The stream's first report is compared
   * with it, so agents reconnecting in thousands (a gateway restart) that report what is recorded
   * start no state-machine transaction each; a value written by someone else after this read is
   * caught by reconcileSync at the next token recheck.
   */
  private openSession(nodeId: string, call: Stream, recorded: SyncStatus): Session {
    const session: Session = { nodeId, call, syncStatus: recorded, queue: Promise.resolve(), ready: false }
    const previous = this.sessions.get(nodeId)
    this.sessions.set(nodeId, session)
    if (previous) previous.call.end()

    call.on('data', (message: AgentMessage) => this.onMessage(session, message))
    const closeSession = () => {
      if (this.sessions.get(session.nodeId) !== session) return
      this.sessions.delete(session.nodeId)
      this.closing.add(session.nodeId)
      this.link()
      this.options.logger.info({ node_id: session.nodeId }, 'agent stream closed')
    }
    call.on('end', () => {
      closeSession()
      call.end()
    })
    call.on('cancelled', closeSession)
    call.on('error', closeSession)
    return session
  }

  private send(session: Session, command: AgentCommand): void {
    session.call.write({ body: 'command', command: { command_id: command.id, type: command.type, payload_json: JSON.stringify(command.payload) } })
  }

  private async deliverPending(): Promise<void> {
    if (this.polling || this.sessions.size === 0) return
    this.polling = true
    try {
      this.polls += 1
      const sweep = this.polls % SWEEP_EVERY_POLLS === 0
      const pending = await findPendingCommands(
        this.options.db,
        sweep ? { limit: SWEEP_LIMIT } : { createdSince: new Date(this.now().getTime() - RECENT_WINDOW_MS), limit: POLL_LIMIT },
      )
      const ours = pending.filter((p) => this.sessions.get(p.node_id)?.ready).map((p) => p.id)
      if (ours.length === 0) return
      const claimed = await claimForDelivery(this.options.db, ours, this.gatewayId, this.now())
      for (const command of claimed) {
        const session = this.sessions.get(command.node_id)
        if (session) this.send(session, command)
      }
    } catch (err) {
      this.options.logger.warn({ err }, 'command delivery poll failed; retrying')
    } finally {
      this.polling = false
    }
  }

  private onMessage(session: Session, message: AgentMessage): void {
    if (message.body === 'heartbeat') {
      this.onHeartbeat(session, message.heartbeat)
      return
    }
    session.queue = session.queue.then(() => this.reportSlots.run(() => this.onReport(session, message))).catch((err: unknown) => {
      this.options.logger.warn({ err, node_id: session.nodeId, report: message.body }, 'could not record an agent report')
    })
  }

  private onHeartbeat(session: Session, heartbeat: HeartbeatMessage): void {
    // A stream replaced by the node's newer one (the agent reconnected, or a new agent after a
    // migration) may still deliver what was in flight: its reports are the past, and recording
    // them would overwrite the current agent's status and sync_status with stale values.
    if (this.sessions.get(session.nodeId) !== session) return
    const syncStatus = (SYNC_STATUSES as readonly string[]).includes(heartbeat.sync_status) ? (heartbeat.sync_status as SyncStatus) : 'unknown'
    const processState = (PROCESS_STATES as readonly string[]).includes(heartbeat.process_state) ? heartbeat.process_state : 'unconfigured'
    this.heartbeats.record({
      nodeId: session.nodeId,
      receivedAt: this.now(),
      agentVersion: heartbeat.agent_version.slice(0, 64) || null,
      binaryVersion: heartbeat.binary_version.slice(0, 64) || null,
      syncStatus,
      processState,
      restartsInWindow: heartbeat.restarts_in_window,
      chainPid: heartbeat.chain_pid ? heartbeat.chain_pid : null,
      metrics: finiteMetrics(heartbeat.metrics),
      runningCommandIds: heartbeat.running_command_ids.slice(0, 100),
      onCommitted: () => this.acknowledge(session, heartbeat.sent_at_unix_ms),
    })
    if (syncStatus !== session.syncStatus && !((session.syncHeldUntil ?? 0) > this.now().getTime())) {
      const from = session.syncStatus
      session.syncStatus = syncStatus
      session.queue = session.queue.then(() => this.forwardSync(session, from, syncStatus))
    }
  }

  /**
   * Fencing (docs/node-agent.md): only a heartbeat that reached the database is acknowledged, and
   * only on the node's current stream; an agent without acknowledgements stops its chain.
   */
  private acknowledge(session: Session, sentAtUnixMs: number): void {
    const call = session.call
    if (this.sessions.get(session.nodeId) !== session || call.destroyed || call.writableEnded) return
    call.write({ body: 'heartbeat_ack', heartbeat_ack: { sent_at_unix_ms: sentAtUnixMs } })
  }

  /**
   * A sync change is a state-machine write, one at a time, off the heartbeat hot path. It is
   * compared with the node's recorded value, not with what this stream reported before, and
   * dropped once a newer stream of the node exists (queued before the stream was replaced, it is
   * the past): a late write of an old agent's report would otherwise stay, unseen by the new one.
   */
  private async forwardSync(session: Session, from: SyncStatus | null, to: SyncStatus): Promise<void> {
    const current = () => this.sessions.get(session.nodeId) === session
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      try {
        const now = this.now()
        if (!current()) return
        const decision = await this.reportSlots.run(() =>
          this.options.db.transaction(async (trx): Promise<SyncChangeDecision | { unchanged: true }> => {
            const recorded = (await trx('nodes').where({ id: session.nodeId }).first('sync_status')) as { sync_status: SyncStatus } | undefined
            if (!current() || recorded?.sync_status === to) return { unchanged: true }
            const admitted = await admitSyncChange(trx, { nodeId: session.nodeId, from: recorded?.sync_status ?? from ?? 'unknown', to }, now, this.options.syncChangeLimit)
            if (admitted.admitted) {
              await applyHealthUpdate(trx, { nodeId: session.nodeId, change: { writer: 'sync_event', sync_status: to }, reason: `agent reported ${to}`, now })
            }
            return admitted
          }),
        )
        if ('unchanged' in decision) return
        if (!decision.admitted) {
          // Not written: the node keeps `from`; reports are looked at again once the hold ends.
          session.syncStatus = from
          session.syncHeldUntil = decision.heldUntil.getTime()
          if (decision.incident) {
            this.options.logger.warn({ node_id: session.nodeId, from, to, held_until: decision.heldUntil.toISOString(), incident_id: decision.incident.incident.id }, 'sync status flapping: changes held back')
          }
          return
        }
        this.options.logger.info({ node_id: session.nodeId, from, to }, 'sync status changed')
        return
      } catch (err) {
        // A concurrent writer (optimistic lock) is retried on a fresh read; a terminal node fails every time.
        if (isDomainError(err) && err.status === 409 && attempt < 3) continue
        // Refused (e.g. the node is terminal): forget the value so the next report tries again.
        session.syncStatus = from
        this.options.logger.warn({ err, node_id: session.nodeId, to }, 'sync status not recorded')
        return
      }
    }
  }

  private async onReport(session: Session, message: Exclude<AgentMessage, { body: 'heartbeat' }>): Promise<void> {
    const db = this.options.db
    const nodeId = session.nodeId
    const now = this.now()
    switch (message.body) {
      case 'ack':
        await recordAck(db, { id: message.ack.command_id, nodeId }, now)
        return
      case 'progress': {
        const p = message.progress
        await recordProgress(db, { id: p.command_id, nodeId, phase: p.phase, message: p.message, stallCount: p.stall_count, stalled: p.stalled }, now)
        return
      }
      case 'completed': {
        const recorded = await recordCompletion(db, { id: message.completed.command_id, nodeId, result: parseReportJson(message.completed.result_json) }, now)
        this.options.logger.info({ node_id: nodeId, command_id: message.completed.command_id, recorded }, 'command completed')
        return
      }
      case 'failed': {
        const f = message.failed
        const recorded = await recordFailure(db, { id: f.command_id, nodeId, error: f.error || 'failed without a reason', result: parseReportJson(f.result_json) ?? undefined }, now)
        this.options.logger.warn({ node_id: nodeId, command_id: f.command_id, error: f.error.slice(0, 500), recorded }, 'command failed')
        return
      }
    }
  }

  private toStatus(err: unknown, call: string): Partial<grpc.StatusObject> {
    if (err instanceof UnauthorizedError) return { code: grpc.status.UNAUTHENTICATED, details: `${err.message}: ${err.details ?? ''}`.trim() }
    const code = (err as { code?: unknown }).code
    if (code === grpc.status.FAILED_PRECONDITION) return { code, details: (err as Error).message }
    this.options.logger.error({ err, call }, 'agent call failed')
    return { code: grpc.status.UNAVAILABLE, details: 'gateway error; retry' }
  }
}

/** At most `max` operations at a time; the others wait their turn in arrival order. */
class Slots {
  private active = 0
  private readonly waiting: Array<() => void> = []

  constructor(private readonly max: number) {}

  async run<T>(op: () => Promise<T>): Promise<T> {
    if (this.active < this.max) this.active += 1
    else await new Promise<void>((resolve) => this.waiting.push(resolve))
    try {
      return await op()
    } finally {
      // A waiting operation takes over the slot as it is.
      const next = this.waiting.shift()
      if (next) next()
      else this.active -= 1
    }
  }
}

function finiteMetrics(metrics: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {}
  let count = 0
  for (const [name, value] of Object.entries(metrics)) {
    if (count >= 64) break
    if (name.length <= 64 && Number.isFinite(value)) {
      out[name] = value
      count += 1
    }
  }
  return out
}

function parseReportJson(json: string): unknown {
  if (!json) return null
  if (json.length > MAX_REPORT_BYTES) return { truncated: true, bytes: json.length }
  try {
    return JSON.parse(json) as unknown
  } catch {
    return { unparseable: json.slice(0, 200) }
  }
}
