/**
 * The node agent's side of the protocol (proto/agent.proto): registers, keeps the stream to the
 * gateway open (reconnecting with backoff), heartbeats, and runs the commands it receives,
 * reporting acknowledgement, progress, stalls and the outcome (spec: "Agent commands run
 * asynchronously").
 */
import os from 'node:os'
import * as grpc from '@grpc/grpc-js'
import type { Logger } from '../log.js'
import {
  agentGatewayService,
  agentMetadata,
  type AgentMessageOut,
  type CommandMessage,
  type GatewayMessage,
  type RegisterRequest,
  type RegisterResponse,
} from '../agents/grpc.js'
import { AGENT_STALL_MARK, isCommandType, type CommandType, type ProcessState } from '../agents/protocol.js'

export interface HostSnapshot {
  binary_version: string
  process_state: ProcessState
  restarts_in_window: number
  sync_status: string
  metrics: Record<string, number>
}

/** What the agent reports about its host in each heartbeat (supervisor + probe + state dir). */
export interface AgentHost {
  snapshot(): Promise<HostSnapshot>
}

export interface CommandReport {
  progress(phase: string, message: string): void
}

export interface CommandRunner {
  execute(command: { id: string; type: CommandType; payload: unknown }, report: CommandReport): Promise<unknown>
}

export interface AgentClientOptions {
  /** host:port of the agent-gateway, or several comma-separated: a lost or unreachable one hands over to the next. */
  target: string
  /** PEM of the CA that signed the gateway's certificate */
  ca: Buffer
  /** Overrides the name checked against the gateway certificate (e.g. when dialling an IP). */
  serverName?: string
  nodeId: string
  token: string
  agentVersion: string
  publicKey: Uint8Array
  host: AgentHost
  runner: CommandRunner
  logger: Logger
  /** Overrides what the gateway says (tests). */
  heartbeatIntervalMs?: number
  progressCheckIntervalMs?: number
  reconnect?: { initialMs: number; maxMs: number }
  /** A refusal that retrying cannot fix (bad token, retired node). */
  onFatal?: (reason: string) => void
}

interface Outcome {
  message: AgentMessageOut
}

interface RunningCommand {
  id: string
  phase: string
  message: string
  progressed: boolean
  stallCount: number
  timer: NodeJS.Timeout
}

type Duplex = grpc.ClientDuplexStream<AgentMessageOut, GatewayMessage>

const FATAL_CODES = new Set([grpc.status.UNAUTHENTICATED, grpc.status.FAILED_PRECONDITION, grpc.status.PERMISSION_DENIED])

type GatewayClient = grpc.Client & Record<string, (...args: unknown[]) => unknown>

export class AgentClient {
  private readonly targets: string[]
  private readonly clients = new Map<string, GatewayClient>()
  private targetIndex = 0
  private stream: Duplex | undefined
  private heartbeatTimer: NodeJS.Timeout | undefined
  private reconnectTimer: NodeJS.Timeout | undefined
  private readonly running = new Map<string, RunningCommand>()
  /** Outcomes of commands run by this process, re-reported when a command arrives again. */
  private readonly outcomes = new Map<string, Outcome>()
  private backoffMs: number
  private stopped = false
  private connectedOnce = false
  heartbeatsSent = 0

  constructor(private readonly options: AgentClientOptions) {
    this.targets = options.target.split(',').map((t) => t.trim()).filter((t) => t.length > 0)
    this.backoffMs = options.reconnect?.initialMs ?? 1_000
  }

  /** The gateway this agent dials now. */
  get target(): string {
    return this.targets[this.targetIndex] as string
  }

  private get client(): GatewayClient {
    let client = this.clients.get(this.target)
    if (!client) {
      const Service = agentGatewayService()
      const channelOptions: grpc.ChannelOptions = {
        'grpc.keepalive_time_ms': 30_000,
        'grpc.keepalive_timeout_ms': 10_000,
        ...(this.options.serverName ? { 'grpc.ssl_target_name_override': this.options.serverName, 'grpc.default_authority': this.options.serverName } : {}),
      }
      client = new Service(this.target, grpc.credentials.createSsl(this.options.ca), channelOptions) as unknown as GatewayClient
      this.clients.set(this.target, client)
    }
    return client
  }

  /** After a failed attempt or a lost stream: the next gateway of the list (the same one when there is one). */
  private nextTarget(): void {
    this.targetIndex = (this.targetIndex + 1) % this.targets.length
  }

  /** Connects in the background; resolves once the first stream is open. */
  start(): Promise<void> {
    return new Promise((resolve) => {
      const attempt = () => {
        if (this.stopped) return resolve()
        this.session().then(
          () => resolve(),
          (err: unknown) => {
            if (this.stopped) return resolve()
            const status = err as Partial<grpc.StatusObject>
            if (status.code !== undefined && FATAL_CODES.has(status.code)) {
              this.options.logger.error({ code: grpc.status[status.code], details: status.details }, 'the gateway refused this agent')
              this.options.onFatal?.(`${grpc.status[status.code]}: ${status.details ?? ''}`)
              return resolve()
            }
            this.options.logger.warn({ target: this.target, details: status.details ?? (err as Error).message, retry_in_ms: this.backoffMs }, 'cannot reach the agent-gateway; retrying')
            this.nextTarget()
            this.scheduleReconnect(attempt)
          },
        )
      }
      attempt()
    })
  }

  get connected(): boolean {
    return this.stream !== undefined
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer)
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer)
    for (const command of this.running.values()) clearInterval(command.timer)
    const stream = this.stream
    this.stream = undefined
    if (stream) {
      await new Promise<void>((resolve) => {
        stream.on('close', resolve)
        stream.on('error', () => resolve())
        stream.end()
        setTimeout(resolve, 1_000).unref()
      })
    }
    for (const client of this.clients.values()) client.close()
  }

  private scheduleReconnect(attempt: () => void): void {
    const delay = this.backoffMs
    this.backoffMs = Math.min(this.backoffMs * 2, this.options.reconnect?.maxMs ?? 30_000)
    this.reconnectTimer = setTimeout(attempt, delay)
    this.reconnectTimer.unref()
  }

  /** Register, then open the stream; rejects with a gRPC status when either fails. */
  private async session(): Promise<void> {
    const metadata = agentMetadata(this.options.nodeId, this.options.token)
    const snapshot = await this.options.host.snapshot()
    const request: RegisterRequest = {
      agent_version: this.options.agentVersion,
      binary_version: snapshot.binary_version,
      hostname: os.hostname(),
      agent_public_key: Buffer.from(this.options.publicKey),
    }
    const response = await new Promise<RegisterResponse>((resolve, reject) => {
      const deadline = new Date(Date.now() + 10_000)
      ;(this.client.Register as (r: RegisterRequest, m: grpc.Metadata, o: grpc.CallOptions, cb: grpc.requestCallback<RegisterResponse>) => void)(
        request,
        metadata,
        { deadline },
        (err, value) => (err ? reject(err) : resolve(value as RegisterResponse)),
      )
    })
    const heartbeatMs = this.options.heartbeatIntervalMs ?? response.heartbeat_interval_seconds * 1_000
    const progressMs = this.options.progressCheckIntervalMs ?? response.progress_check_interval_seconds * 1_000

    const stream = (this.client.Connect as (m: grpc.Metadata) => Duplex)(metadata)
    await new Promise<void>((resolve, reject) => {
      // The first heartbeat proves the stream is up; an auth refusal arrives as an error status.
      const onError = (err: grpc.ServiceError) => reject(err)
      stream.once('error', onError)
      stream.once('metadata', () => {
        stream.off('error', onError)
        resolve()
      })
      void this.heartbeat(stream)
    })
    // stop() may have been called while this (re)connection was being made.
    if (this.stopped) {
      stream.end()
      return
    }
    this.stream = stream
    this.backoffMs = this.options.reconnect?.initialMs ?? 1_000
    this.options.logger.info({ node_id: this.options.nodeId, target: this.target, reconnect: this.connectedOnce }, 'connected to the agent-gateway')
    this.connectedOnce = true

    stream.on('data', (message: GatewayMessage) => {
      if (message.body === 'command') this.onCommand(message.command, progressMs)
    })
    const onGone = (err?: grpc.ServiceError) => {
      if (this.stream !== stream) return
      this.stream = undefined
      if (this.heartbeatTimer) clearInterval(this.heartbeatTimer)
      if (this.stopped) return
      if (err?.code !== undefined && FATAL_CODES.has(err.code)) {
        this.options.logger.error({ code: grpc.status[err.code], details: err.details }, 'the gateway closed the stream and refused this agent')
        this.options.onFatal?.(`${grpc.status[err.code]}: ${err.details}`)
        return
      }
      this.options.logger.warn({ target: this.target, details: err?.details ?? 'stream ended' }, 'lost the agent-gateway stream; reconnecting')
      this.nextTarget()
      this.scheduleReconnect(() => void this.start())
    }
    stream.on('error', onGone)
    stream.on('end', () => onGone())

    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer)
    this.heartbeatTimer = setInterval(() => void this.heartbeat(stream), heartbeatMs)
    this.heartbeatTimer.unref()
  }

  private async heartbeat(stream: Duplex): Promise<void> {
    let snapshot: HostSnapshot
    try {
      snapshot = await this.options.host.snapshot()
    } catch (err) {
      this.options.logger.warn({ err }, 'could not read the host state for a heartbeat')
      snapshot = { binary_version: '', process_state: 'unconfigured', restarts_in_window: 0, sync_status: 'unknown', metrics: {} }
    }
    if (stream.destroyed || stream.writableEnded) return
    stream.write({
      heartbeat: {
        sent_at_unix_ms: Date.now(),
        agent_version: this.options.agentVersion,
        binary_version: snapshot.binary_version,
        running_command_ids: [...this.running.keys()],
        sync_status: snapshot.sync_status,
        metrics: snapshot.metrics,
        process_state: snapshot.process_state,
        restarts_in_window: snapshot.restarts_in_window,
      },
    })
    this.heartbeatsSent += 1
  }

  private send(message: AgentMessageOut): void {
    const stream = this.stream
    if (stream && !stream.destroyed && !stream.writableEnded) stream.write(message)
  }

  private onCommand(command: CommandMessage, progressCheckMs: number): void {
    const id = command.command_id
    if (this.running.has(id)) return
    const outcome = this.outcomes.get(id)
    if (outcome) {
      this.send(outcome.message)
      return
    }
    if (!isCommandType(command.type)) {
      this.finish(id, { failed: { command_id: id, error: `unknown command type "${command.type.slice(0, 40)}"`, result_json: '' } })
      return
    }
    let payload: unknown
    try {
      payload = JSON.parse(command.payload_json) as unknown
    } catch {
      this.finish(id, { failed: { command_id: id, error: 'payload is not JSON', result_json: '' } })
      return
    }
    this.send({ ack: { command_id: id } })
    const tracked: RunningCommand = {
      id,
      phase: 'started',
      message: '',
      progressed: true,
      stallCount: 0,
      timer: setInterval(() => this.checkProgress(tracked), progressCheckMs),
    }
    tracked.timer.unref()
    this.running.set(id, tracked)
    this.options.logger.info({ command_id: id, type: command.type }, 'command received')

    const report: CommandReport = {
      progress: (phase, message) => {
        tracked.phase = phase
        tracked.message = message
        tracked.progressed = true
        tracked.stallCount = 0
        this.send({ progress: { command_id: id, phase, message: message.slice(0, 500), stall_count: 0, stalled: false } })
      },
    }
    this.options.runner.execute({ id, type: command.type, payload }, report).then(
      (result) => this.finish(id, { completed: { command_id: id, result_json: JSON.stringify(result ?? null) } }),
      (err: unknown) => {
        const partial = (err as { result?: unknown }).result
        const error = err instanceof Error ? err.message : String(err)
        this.options.logger.warn({ command_id: id, type: command.type, error }, 'command failed')
        this.finish(id, { failed: { command_id: id, error: error.slice(0, 2_000), result_json: partial === undefined ? '' : JSON.stringify(partial) } })
      },
    )
  }

  /** Spec: a stall is marked after 5 consecutive checks without progress; counting goes on. */
  private checkProgress(command: RunningCommand): void {
    if (command.progressed) {
      command.progressed = false
      return
    }
    command.stallCount += 1
    this.send({
      progress: {
        command_id: command.id,
        phase: command.phase,
        message: command.message.slice(0, 500),
        stall_count: command.stallCount,
        stalled: command.stallCount >= AGENT_STALL_MARK,
      },
    })
  }

  private finish(id: string, message: AgentMessageOut): void {
    const tracked = this.running.get(id)
    if (tracked) clearInterval(tracked.timer)
    this.running.delete(id)
    this.outcomes.set(id, { message })
    if (this.outcomes.size > 1_000) this.outcomes.delete(this.outcomes.keys().next().value as string)
    this.send(message)
  }
}
