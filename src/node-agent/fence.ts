/**
 * Fencing (issue 19; docs/node-agent.md, "Fencing"): a node must never run in two places. When
 * its host is cut off the control plane cannot tell the agent to stop, and migrates the node
 * elsewhere; so an agent that has had no heartbeat acknowledged by any agent-gateway for the
 * fence timeout stops its chain by itself, and keeps it stopped until a gateway acknowledges a
 * heartbeat again (then the chain that ran starts again) or refuses the agent (superseded:
 * superseded.ts cleans up and the agent exits 77).
 *
 * The chain is gone by the fence timeout, not merely told to go: the stop begins `graceMs` before
 * it (SIGTERM, SIGKILL at the timeout), so the control plane, which starts a replacement no
 * earlier than the old node's last recorded heartbeat plus the same timeout, never overlaps it.
 * The clock is the agent's own monotonic one, anchored at the *send* time of the last
 * acknowledged heartbeat, which is before the gateway recorded it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import type { Logger } from '../log.js'
import type { ChainSupervisor } from './supervisor.js'
import { writeFileAtomic, type StateDir } from './state-dir.js'

export const DEFAULT_FENCE_TIMEOUT_MS = 60_000
/** SIGTERM to SIGKILL when fencing: at most 10 s (the supervisor's usual grace), a quarter of a short timeout. */
export function fenceStopGraceMs(timeoutMs: number): number {
  return Math.min(10_000, Math.floor(timeoutMs / 4))
}

export interface FenceOptions {
  timeoutMs: number
  supervisor: ChainSupervisor
  stateDir: StateDir
  logger: Logger
  /** Monotonic milliseconds (tests). */
  now?: () => number
  /**
   * Called once the chain is fenced: the agent drops its stream, so that only a new one (its
   * token checked again) can lift the fence — never a stream opened before a migration replaced it.
   */
  onFenced?: () => void
}

/** `fence.json`: why the chain is stopped, while it is. */
export interface FenceRecord {
  fenced_at: string
  reason: string
  timeout_ms: number
  /** How long before the fence the last heartbeat was acknowledged. */
  silent_for_ms: number
  /** Whether a chain process was running when the fence stopped it. */
  stopped_pid: number | null
}

export function fenceFile(dir: StateDir): string {
  return path.join(dir.root, 'fence.json')
}

export function readFenceRecord(dir: StateDir): FenceRecord | undefined {
  try {
    return JSON.parse(fs.readFileSync(fenceFile(dir), 'utf8')) as FenceRecord
  } catch {
    return undefined
  }
}

export class Fence {
  private readonly now: () => number
  private readonly graceMs: number
  private lastContact: number
  private timer: NodeJS.Timeout | undefined
  /** A fence or a lift in progress; the next check waits for it. */
  private busy: Promise<void> | undefined
  private contacted = false
  private stopped = false

  constructor(private readonly options: FenceOptions) {
    if (!(options.timeoutMs > 0)) throw new Error(`Fence: timeoutMs must be positive (got ${options.timeoutMs})`)
    this.now = options.now ?? (() => performance.now())
    this.graceMs = fenceStopGraceMs(options.timeoutMs)
    // Never reached a gateway yet: the clock runs from the agent's start.
    this.lastContact = this.now()
  }

  /** Checks a few times per grace period, so the stop begins on time. */
  start(): void {
    const every = Math.max(20, Math.min(1_000, Math.floor(this.graceMs / 2)))
    // Not unref'd: with the chain fenced and the stream dropped, between two connection
    // attempts (their timers are unref'd) this is what keeps the agent process alive.
    this.timer = setInterval(() => void this.check(), every)
  }

  stop(): void {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
  }

  /** A gateway acknowledged a heartbeat the agent sent at `sentAt` (this clock). */
  contact(sentAt: number): void {
    if (sentAt > this.lastContact) this.lastContact = sentAt
    if (this.stopped || this.busy) return
    if (!this.contacted || this.options.supervisor.fenced) this.run(() => this.lift())
  }

  /** Whether the chain is stopped by the fence now. */
  get fenced(): boolean {
    return this.options.supervisor.fenced
  }

  private run(work: () => Promise<void>): void {
    this.busy = work()
      .catch((err: unknown) => this.options.logger.error({ err }, 'fence: could not change the chain process'))
      .finally(() => {
        this.busy = undefined
      })
  }

  private async check(): Promise<void> {
    if (this.stopped || this.busy) return
    const silentFor = this.now() - this.lastContact
    if (silentFor < this.options.timeoutMs - this.graceMs) return
    if (this.options.supervisor.fenced) {
      // Fenced since the agent started (never reached a gateway): record that once.
      if (!this.contacted && !fs.existsSync(fenceFile(this.options.stateDir))) this.record(silentFor, null, 'no agent-gateway reached since the agent started')
      return
    }
    this.run(() => this.fence(silentFor))
  }

  private async fence(silentFor: number): Promise<void> {
    const { supervisor, logger } = this.options
    const pid = supervisor.status().pid ?? null
    const reason = `no heartbeat acknowledged by any agent-gateway for ${Math.round(silentFor)} ms (fence timeout ${this.options.timeoutMs} ms)`
    logger.warn({ chain_pid: pid, silent_for_ms: Math.round(silentFor), fence_timeout_ms: this.options.timeoutMs, grace_ms: this.graceMs }, 'fence: stopping the chain process; it starts again once a gateway acknowledges this agent')
    await supervisor.fence(this.graceMs)
    this.record(silentFor, pid, reason)
    this.options.onFenced?.()
  }

  private record(silentFor: number, pid: number | null, reason: string): void {
    const record: FenceRecord = {
      fenced_at: new Date().toISOString(),
      reason,
      timeout_ms: this.options.timeoutMs,
      silent_for_ms: Math.round(silentFor),
      stopped_pid: pid,
    }
    writeFileAtomic(fenceFile(this.options.stateDir), JSON.stringify(record, null, 2), 0o600)
  }

  /** A gateway answers again: the chain that ran (chain.wanted) runs again. */
  private async lift(): Promise<void> {
    const { supervisor, logger, stateDir } = this.options
    const first = !this.contacted
    this.contacted = true
    if (!supervisor.fenced) return
    const record = readFenceRecord(stateDir)
    supervisor.unfence()
    fs.rmSync(fenceFile(stateDir), { force: true })
    if (record) logger.info({ fenced_at: record.fenced_at }, 'fence lifted: an agent-gateway acknowledged this agent again')
    const resumed = await supervisor.resumeIfWanted()
    if (!first || record) logger.info({ resumed }, resumed ? 'the chain process was started again after the fence' : 'fence lifted; the chain was not meant to run')
  }
}
