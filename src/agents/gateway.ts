/**
 * The gateway side of the agent protocol (proto/agent.proto): authenticates agents, keeps one
 * stream per connected node, batches heartbeats, forwards sync changes to the health state
 * machine, records command reports, and delivers commands the orchestrator left in the database.
 */
import os from 'node:os'
import crypto from 'node:crypto'
import * as grpc from '@grpc/grpc-js'
import type { Db } from '../db/knex.js'
import { isDomainError, UnauthorizedError } from '../errors.js'
import type { Logger } from '../log.js'
import { applyHealthUpdate } from '../nodes/health-state-machine.js'
import { findNode } from '../nodes/node-store.js'
import { SYNC_STATUSES, type SyncStatus } from '../nodes/states.js'
import {
  claimForDelivery,
  findPendingCommands,
  listUnfinishedCommands,
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
import { HeartbeatBatcher } from './heartbeats.js'
import { PROCESS_STATES } from './protocol.js'
import { markConnected, markDisconnected, recordRegistration } from './registrations.js'
import { authenticateAgent, isRetiredNode, type AuthenticatedAgent } from './tokens.js'

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
  onHeartbeatsFlushed?: (latenciesMs: Float64Array) => void
}

type Stream = grpc.ServerDuplexStream<AgentMessage, GatewayMessage>

interface Session {
  nodeId: string
  call: Stream
  /** The node's sync_status as last written, so only changes reach the state machine. */
  syncStatus: SyncStatus
  /** Reports are written in arrival order (an ack before the completion it precedes). */
  queue: Promise<void>
}

/** Commands created within this window are looked at on every poll; older ones by a sweep. */
const RECENT_WINDOW_MS = 60_000
const SWEEP_EVERY_POLLS = 40
const POLL_LIMIT = 1_000
const SWEEP_LIMIT = 10_000
const MAX_REPORT_BYTES = 1_000_000

export class AgentGateway {
  readonly gatewayId: string
  readonly heartbeats: HeartbeatBatcher
  private readonly server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 })
  private readonly sessions = new Map<string, Session>()
  private readonly now: () => Date
  private pollTimer: NodeJS.Timeout | undefined
  private polls = 0
  private polling = false
  private closed = false
  /** Disconnect records still being written; close() waits for them before the database goes. */
  private readonly background = new Set<Promise<void>>()

  constructor(private readonly options: AgentGatewayOptions) {
    this.gatewayId = options.gatewayId ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString('hex')}`
    this.now = options.now ?? (() => new Date())
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
    return bound
  }

  /** Stops accepting calls, ends every stream (agents reconnect elsewhere), flushes heartbeats. */
  async close(graceMs = 2_000): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.pollTimer) clearInterval(this.pollTimer)
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
    await Promise.all([...this.background])
    await this.heartbeats.stop()
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

  private async connect(call: Stream): Promise<void> {
    let agent: AuthenticatedAgent
    try {
      agent = await this.authenticate(call.metadata)
    } catch (err) {
      call.emit('error', this.toStatus(err, 'Connect'))
      return
    }
    if (this.closed) {
      call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'gateway is shutting down' })
      return
    }
    const node = await findNode(this.options.db, agent.nodeId)
    const session: Session = { nodeId: agent.nodeId, call, syncStatus: node?.sync_status ?? 'unknown', queue: Promise.resolve() }
    const previous = this.sessions.get(agent.nodeId)
    this.sessions.set(agent.nodeId, session)
    if (previous) previous.call.end()

    call.on('data', (message: AgentMessage) => this.onMessage(session, message))
    const closeSession = () => {
      if (this.sessions.get(session.nodeId) !== session) return
      this.sessions.delete(session.nodeId)
      const write = markDisconnected(this.options.db, session.nodeId, this.gatewayId, this.now()).catch((err: unknown) =>
        this.options.logger.warn({ err, node_id: session.nodeId }, 'could not record the agent disconnect'),
      )
      this.background.add(write)
      void write.finally(() => this.background.delete(write))
      this.options.logger.info({ node_id: session.nodeId }, 'agent stream closed')
    }
    call.on('end', () => {
      closeSession()
      call.end()
    })
    call.on('cancelled', closeSession)
    call.on('error', closeSession)

    try {
      await markConnected(this.options.db, agent.nodeId, this.gatewayId, this.now())
      // Headers tell the agent the stream is accepted before any command flows.
      call.sendMetadata(new grpc.Metadata())
      await this.sendUnfinished(session)
      this.options.logger.info({ node_id: agent.nodeId }, 'agent connected')
    } catch (err) {
      this.options.logger.error({ err, node_id: agent.nodeId }, 'could not set up the agent stream')
      call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'gateway cannot reach its database; reconnect' })
    }
  }

  /** Everything not finished is (re)sent: the agent deduplicates by command id. */
  private async sendUnfinished(session: Session): Promise<void> {
    const commands = await listUnfinishedCommands(this.options.db, session.nodeId)
    if (commands.length === 0) return
    await markResent(this.options.db, commands.filter((c) => c.status !== 'running').map((c) => c.id), this.gatewayId, this.now())
    for (const command of commands) this.send(session, command)
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
      const ours = pending.filter((p) => this.sessions.has(p.node_id)).map((p) => p.id)
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
    session.queue = session.queue.then(() => this.onReport(session, message)).catch((err: unknown) => {
      this.options.logger.warn({ err, node_id: session.nodeId, report: message.body }, 'could not record an agent report')
    })
  }

  private onHeartbeat(session: Session, heartbeat: HeartbeatMessage): void {
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
      metrics: finiteMetrics(heartbeat.metrics),
      runningCommandIds: heartbeat.running_command_ids.slice(0, 100),
    })
    if (syncStatus !== session.syncStatus) {
      const from = session.syncStatus
      session.syncStatus = syncStatus
      session.queue = session.queue.then(() => this.forwardSync(session, from, syncStatus))
    }
  }

  /** A sync change is a state-machine write, one at a time, off the heartbeat hot path. */
  private async forwardSync(session: Session, from: SyncStatus, to: SyncStatus): Promise<void> {
    for (let attempt = 1; attempt <= 3; attempt += 1) {
      try {
        await this.options.db.transaction((trx) =>
          applyHealthUpdate(trx, { nodeId: session.nodeId, change: { writer: 'sync_event', sync_status: to }, reason: `agent reported ${to}`, now: this.now() }),
        )
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
