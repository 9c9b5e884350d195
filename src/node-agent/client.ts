/**
 * The node agent's side of the protocol (proto/agent.proto): registers, keeps the stream to the
 * gateway open, heartbeats, and runs the commands it receives, reporting acknowledgement,
 * progress, stalls and the outcome (spec: "Agent commands run asynchronously").
 *
 * Reconnecting (issue 22): a lost stream or a failed attempt moves to the next configured gateway
 * at once; when every gateway of the list failed in a row, the agent waits a short, jittered delay
 * (`reconnect`: doubling from `initialMs`, never above `maxMs`) and goes round again. Each attempt
 * after a failure dials a fresh gRPC channel with a subchannel of its own: a channel that failed
 * keeps its own exponential backoff (up to 2 minutes in grpc-js) and answers every call with the
 * old ECONNREFUSED until it ends, so a gateway back after a short outage waited out that backoff.
 */
import os from 'node:os'
import { performance } from 'node:perf_hooks'
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
} from '../agent-gateway/grpc.js'
import { AGENT_STALL_MARK, isCommandType, type CommandType, type ProcessState } from '../agent-gateway/protocol.js'

export interface HostSnapshot {
  binary_version: string
  process_state: ProcessState
  restarts_in_window: number
  sync_status: string
  metrics: Record<string, number>
  /** The chain process's pid while one runs. */
  chain_pid?: number | undefined
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
  /** Delays between rounds over the gateways (default `AGENT_RECONNECT`). */
  reconnect?: ReconnectPolicy
  /** A refusal that retrying cannot fix (bad token, retired node). */
  onFatal?: (reason: string) => void
  /**
   * The gateway proved it hears this agent: a stream opened (its token checked and the connect
   * recorded) or a heartbeat acknowledged once committed. `sentAt` is performance.now() when the
   * agent made that call or sent that heartbeat (the fence's clock, fence.ts).
   */
  onContact?: (sentAt: number) => void
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

export interface ReconnectPolicy {
  /** The delay after the first round in which every gateway failed. */
  initialMs: number
  /** The longest delay: bounds how long a gateway that is reachable again waits for its agents. */
  maxMs: number
}

/**
 * The production policy: a gateway reachable again has its agents back within about a second
 * (`maxMs` plus a connection), while an absent gateway costs each agent about one refused
 * connection a second.
 */
export const AGENT_RECONNECT: ReconnectPolicy = { initialMs: 250, maxMs: 1_000 }

/**
 * A delay drawn from [half, whole] of `ms`: a fleet that lost its gateway together spreads its
 * attempts over the window instead of arriving at the same instant ("equal jitter").
 */
export function jittered(ms: number, random: () => number = Math.random): number {
  return Math.round(ms / 2 + random() * (ms / 2))
}

/** A warning at the start of an outage, then one a minute while it lasts; each attempt at debug. */
const OUTAGE_WARNING_EVERY_MS = 60_000

const FATAL_CODES = new Set([grpc.status.UNAUTHENTICATED, grpc.status.FAILED_PRECONDITION, grpc.status.PERMISSION_DENIED])

type GatewayClient = grpc.Client & Record<string, (...args: unknown[]) => unknown>

export class AgentClient {
  private readonly targets: string[]
  private readonly clients = new Map<string, GatewayClient>()
  private targetIndex = 0
  private stream: Duplex | undefined
  private heartbeatTimer: NodeJS.Timeout | undefined
  private reconnectTimer: NodeJS.Timeout | undefined
  /** Ends a pending wait early (stop()). */
  private wake: (() => void) | undefined
  private readonly running = new Map<string, RunningCommand>()
  /** Outcomes of commands run by this process, re-reported when a command arrives again. */
  private readonly outcomes = new Map<string, Outcome>()
  private readonly reconnect: ReconnectPolicy
  private stopped = false
  private connectedOnce = false
  /** When the current outage began (the first failure since the last stream), for the log. */
  private unreachableSince: number | undefined
  /** When the outage was last logged at warn level; undefined: not yet in this outage. */
  private lastOutageWarning: number | undefined
  heartbeatsSent = 0
  heartbeatsAcknowledged = 0
  /** sent_at_unix_ms of heartbeats not yet acknowledged -> performance.now() at sending. */
  private readonly unacknowledged = new Map<number, number>()
  /** What the last Register said, kept for reconnects. */
  private registration: { binaryVersion: string; heartbeatMs: number; progressMs: number } | undefined
  /** Attempts that failed to reach a gateway since start (for tests and the bench). */
  failedAttempts = 0

  constructor(private readonly options: AgentClientOptions) {
    this.targets = options.target.split(',').map((t) => t.trim()).filter((t) => t.length > 0)
    if (this.targets.length === 0) throw new Error('AgentClient: target names no gateway (host:port, or several separated by commas)')
    this.reconnect = options.reconnect ?? AGENT_RECONNECT
    if (!(this.reconnect.initialMs > 0 && this.reconnect.maxMs >= this.reconnect.initialMs)) {
      throw new Error(`AgentClient: reconnect needs 0 < initialMs <= maxMs (got ${this.reconnect.initialMs} and ${this.reconnect.maxMs})`)
    }
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
        // A fresh channel must not pick up a failed one's subchannel (and its backoff) from the
        // process-wide pool; and a channel's own retries stay as short as the agent's.
        'grpc.use_local_subchannel_pool': 1,
        'grpc.initial_reconnect_backoff_ms': this.reconnect.initialMs,
        'grpc.max_reconnect_backoff_ms': this.reconnect.maxMs,
        ...(this.options.serverName ? { 'grpc.ssl_target_name_override': this.options.serverName, 'grpc.default_authority': this.options.serverName } : {}),
      }
      client = new Service(this.target, grpc.credentials.createSsl(this.options.ca), channelOptions) as unknown as GatewayClient
      this.clients.set(this.target, client)
    }
    return client
  }

  /**
   * After a failed attempt or a lost stream: the channel to that gateway is dropped (the next
   * attempt dials afresh) and the next gateway of the list is tried (the same one when there is one).
   */
  private abandonTarget(): void {
    const client = this.clients.get(this.target)
    this.clients.delete(this.target)
    client?.close()
    this.targetIndex = (this.targetIndex + 1) % this.targets.length
  }

  /** Connects in the background; resolves once the first stream is open (or the agent is refused or stopped). */
  start(): Promise<void> {
    return this.connectLoop(0)
  }

  /**
   * Tries the gateways in turn from the current one, with no wait between them; after a round in
   * which all failed, waits a jittered delay that doubles up to `maxMs`. `firstDelayMs` spreads a
   * fleet whose gateway went away at one instant.
   */
  private async connectLoop(firstDelayMs: number): Promise<void> {
    if (firstDelayMs > 0 && !(await this.wait(firstDelayMs))) return
    let delayMs = this.reconnect.initialMs
    for (;;) {
      for (let tried = 0; tried < this.targets.length; tried++) {
        if (this.stopped) return
        try {
          await this.session()
          return
        } catch (err) {
          if (this.stopped) return
          const status = err as Partial<grpc.StatusObject>
          if (status.code !== undefined && FATAL_CODES.has(status.code)) {
            this.options.logger.error({ code: grpc.status[status.code], details: status.details }, 'the gateway refused this agent')
            this.options.onFatal?.(`${grpc.status[status.code]}: ${status.details ?? ''}`)
            return
          }
          this.failedAttempts += 1
          this.noteUnreachable(status.details ?? (err as Error).message)
          this.abandonTarget()
        }
      }
      if (!(await this.wait(jittered(delayMs)))) return
      delayMs = Math.min(delayMs * 2, this.reconnect.maxMs)
    }
  }

  /** Resolves false when the agent was stopped meanwhile. */
  private wait(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.stopped) return resolve(false)
      this.wake = () => resolve(false)
      this.reconnectTimer = setTimeout(() => {
        this.wake = undefined
        resolve(!this.stopped)
      }, ms)
      this.reconnectTimer.unref()
    })
  }

  private noteUnreachable(details: string): void {
    const now = Date.now()
    const fields = { target: this.target, details }
    this.unreachableSince ??= now
    if (this.lastOutageWarning === undefined) {
      this.lastOutageWarning = now
      this.options.logger.warn(fields, 'cannot reach the agent-gateway; retrying every gateway about once a second')
    } else if (now - this.lastOutageWarning >= OUTAGE_WARNING_EVERY_MS) {
      this.lastOutageWarning = now
      this.options.logger.warn({ ...fields, unreachable_for_ms: now - this.unreachableSince }, 'still cannot reach any agent-gateway; retrying')
    } else {
      this.options.logger.debug(fields, 'agent-gateway attempt failed')
    }
  }

  /**
   * Drops the current stream, if any, and reconnects with a new one (fencing: a stream that went
   * quiet is not trusted again; a new one has its token checked).
   */
  dropStream(): void {
    const stream = this.stream
    if (!stream || this.stopped) return
    this.options.logger.info({ target: this.target }, 'dropping the agent-gateway stream; reconnecting')
    stream.cancel()
  }

  get connected(): boolean {
    return this.stream !== undefined
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer)
    this.wake?.()
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

  /**
   * Register (the first time, and again when the binary changed since), then open the stream;
   * rejects with a gRPC status when either fails. A reconnect skips Register: the gateway records
   * the new stream's gateway with the connect, and after a gateway restart a fleet's Registers
   * (an unbatched read and write each) were most of the gateway's work before it could take
   * their streams.
   */
  private async session(): Promise<void> {
    const metadata = agentMetadata(this.options.nodeId, this.options.token)
    const snapshot = await this.options.host.snapshot()
    if (!this.registration || this.registration.binaryVersion !== snapshot.binary_version) {
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
      this.registration = {
        binaryVersion: snapshot.binary_version,
        heartbeatMs: this.options.heartbeatIntervalMs ?? response.heartbeat_interval_seconds * 1_000,
        progressMs: this.options.progressCheckIntervalMs ?? response.progress_check_interval_seconds * 1_000,
      }
    }
    const { heartbeatMs, progressMs } = this.registration

    const connectedAt = performance.now()
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
    this.options.onContact?.(connectedAt)
    const unreachableForMs = this.unreachableSince === undefined ? undefined : Date.now() - this.unreachableSince
    this.unreachableSince = undefined
    this.lastOutageWarning = undefined
    this.options.logger.info(
      { node_id: this.options.nodeId, target: this.target, reconnect: this.connectedOnce, ...(unreachableForMs !== undefined ? { unreachable_for_ms: unreachableForMs } : {}) },
      'connected to the agent-gateway',
    )
    this.connectedOnce = true

    stream.on('data', (message: GatewayMessage) => {
      if (message.body === 'command') this.onCommand(message.command, progressMs)
      else if (message.body === 'heartbeat_ack') this.onHeartbeatAck(message.heartbeat_ack.sent_at_unix_ms)
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
      this.unreachableSince ??= Date.now()
      this.abandonTarget()
      void this.connectLoop(Math.round(Math.random() * this.reconnect.initialMs))
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
    let sentAt = Date.now()
    // Two heartbeats in one millisecond would share an acknowledgement.
    while (this.unacknowledged.has(sentAt)) sentAt += 1
    this.unacknowledged.set(sentAt, performance.now())
    // Acknowledgements lost with a stream never come: keep the newest few.
    if (this.unacknowledged.size > 32) this.unacknowledged.delete(this.unacknowledged.keys().next().value as number)
    stream.write({
      heartbeat: {
        sent_at_unix_ms: sentAt,
        agent_version: this.options.agentVersion,
        binary_version: snapshot.binary_version,
        running_command_ids: [...this.running.keys()],
        sync_status: snapshot.sync_status,
        metrics: snapshot.metrics,
        process_state: snapshot.process_state,
        restarts_in_window: snapshot.restarts_in_window,
        chain_pid: snapshot.chain_pid ?? 0,
      },
    })
    this.heartbeatsSent += 1
  }

  private onHeartbeatAck(sentAtUnixMs: number): void {
    const mark = this.unacknowledged.get(Number(sentAtUnixMs))
    if (mark === undefined) return
    // This one and every older heartbeat are settled.
    for (const [sentAt] of this.unacknowledged) {
      if (sentAt > sentAtUnixMs) break
      this.unacknowledged.delete(sentAt)
    }
    this.heartbeatsAcknowledged += 1
    this.options.onContact?.(mark)
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
