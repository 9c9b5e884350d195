/**
 * Runs the chain process of the active deployment (`active.json`), restarts it with backoff when
 * it exits on its own, and gives up (state `crash_loop`) after `crash_loop.max_restarts`
 * restarts within `crash_loop.window_seconds`, until an explicit start or restart.
 *
 * The chain process never outlives the agent on purpose: `close()` stops it (SIGTERM, then
 * SIGKILL after the grace period); should the agent exit without closing (an uncaught error, a
 * shutdown timeout), an exit hook sends it SIGTERM; and should the agent be killed outright, the
 * next supervisor finds it through `chain.pid` and stops it before starting a new one. A chain
 * node must not run unsupervised: nothing would restart it, report it or stop it for an upgrade.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import type { Logger } from 'pino'
import type { ProcessState } from '../agent-gateway/protocol.js'
import { readActiveDeployment, releaseBinaryPath, writeFileAtomic, type ActiveDeployment, type StateDir } from './state-dir.js'

export interface SupervisorOptions {
  stateDir: StateDir
  logger: Logger
  /** For the crash-loop window; the wall clock otherwise. */
  clock?: () => Date
  /** How long a started process must stay up for start() to succeed (default 500 ms). */
  settleMs?: number
  /** SIGTERM to SIGKILL (default 10 s). */
  stopGraceMs?: number
  /** Delay before the n-th restart in the window: initialMs * 2^n, at most maxMs (default 1 s .. 30 s). */
  restartBackoff?: { initialMs: number; maxMs: number }
  /** Longer output lines are cut (default 4096 characters). */
  maxLineLength?: number
  /**
   * Start fenced: no chain process may start until `unfence()` (the agent's first gateway
   * contact; docs/node-agent.md, "Fencing"). Default false.
   */
  fenced?: boolean
}

/** How a stop ended: the chain exited on SIGTERM, had to be killed, or was not running. */
export type StopOutcome = 'exited' | 'killed' | 'not_running'

export interface ProcessExit {
  code: number | null
  signal: string | null
  at: string
}

export interface SupervisorStatus {
  process_state: ProcessState
  pid?: number
  restarts_in_window: number
  last_exit?: ProcessExit
  binary_name?: string
  version?: string
}

interface Running {
  proc: ChildProcess
  pid: number
  binary: string
  exited: Promise<ProcessExit>
  /** stop() is ending it: its exit is not a crash. */
  stopping: boolean
  /** start() is watching it through the settle period and reports an early exit itself. */
  settling: boolean
  recentOutput: string[]
}

const INHERITED_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR']
const RECENT_LINES = 8

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export class ChainSupervisor {
  readonly #dir: StateDir
  readonly #logger: Logger
  readonly #clock: () => Date
  readonly #settleMs: number
  readonly #stopGraceMs: number
  readonly #backoff: { initialMs: number; maxMs: number }
  readonly #maxLineLength: number

  #deployment: ActiveDeployment | undefined
  #child: Running | undefined
  #wantRunning = false
  #crashLoop = false
  #restarts: number[] = []
  #restartTimer: NodeJS.Timeout | undefined
  #lastExit: ProcessExit | undefined
  #closed = false
  #fenced: boolean
  #queue: Promise<unknown> = Promise.resolve()
  readonly #onProcessExit = () => {
    if (this.#child) {
      try {
        process.kill(this.#child.pid, 'SIGTERM')
      } catch {
        // already gone
      }
    }
  }

  constructor(options: SupervisorOptions) {
    this.#dir = options.stateDir
    this.#logger = options.logger
    this.#clock = options.clock ?? (() => new Date())
    this.#settleMs = options.settleMs ?? 500
    this.#stopGraceMs = options.stopGraceMs ?? 10_000
    this.#backoff = options.restartBackoff ?? { initialMs: 1_000, maxMs: 30_000 }
    this.#maxLineLength = options.maxLineLength ?? 4_096
    this.#fenced = options.fenced ?? false
    try {
      this.#deployment = readActiveDeployment(this.#dir)
    } catch (err) {
      this.#logger.error({ err }, 'cannot read the active deployment; the node is unconfigured until the next configure')
    }
    process.on('exit', this.#onProcessExit)
  }

  /** The deployment start() runs. */
  get deployment(): ActiveDeployment | undefined {
    return this.#deployment
  }

  /**
   * Makes `deployment` (by default: `active.json` as it is now) the one the next start runs. A
   * running process is not touched.
   */
  reload(deployment?: ActiveDeployment): ActiveDeployment | undefined {
    this.#deployment = deployment ?? readActiveDeployment(this.#dir)
    return this.#deployment
  }

  isRunning(): boolean {
    return this.#child !== undefined && !this.#child.stopping
  }

  status(): SupervisorStatus {
    const d = this.#deployment
    const base = {
      restarts_in_window: this.#restartsInWindow(),
      ...(this.#lastExit ? { last_exit: this.#lastExit } : {}),
      ...(d ? { binary_name: d.binary_name, version: d.version } : {}),
    }
    if (this.#child) return { process_state: 'running', pid: this.#child.pid, ...base }
    if (this.#crashLoop) return { process_state: 'crash_loop', ...base }
    if (!d) return { process_state: 'unconfigured', ...base }
    // Between a crash and its restart the process is still meant to run.
    return { process_state: this.#wantRunning ? 'running' : 'stopped', ...base }
  }

  /**
   * Starts the process unless it runs already, clearing a crash loop. Resolves once it has
   * stayed up for the settle period; rejects (and leaves it stopped) when it exits before.
   */
  start(): Promise<void> {
    return this.#enqueue(() => this.#start())
  }

  /**
   * Stops the process (SIGTERM, SIGKILL after the grace period) and any pending restart. Says how:
   * `killed` means the chain did not exit on its own, so what it writes as it exits may be partial.
   */
  stop(): Promise<StopOutcome> {
    return this.#enqueue(async () => {
      const how = await this.#stop()
      fs.rmSync(this.#wantedFile, { force: true })
      return how
    })
  }

  /**
   * After an agent restart (an agent upgrade, a host reboot): starts the chain again when it was
   * last started and not explicitly stopped. Returns whether it started it.
   */
  async resumeIfWanted(): Promise<boolean> {
    if (!fs.existsSync(this.#wantedFile) || !this.#deployment) return false
    this.#logger.info('the chain process was running before the agent restarted; starting it again')
    await this.start()
    return true
  }

  get #wantedFile(): string {
    return path.join(this.#dir.root, 'chain.wanted')
  }

  restart(): Promise<void> {
    return this.#enqueue(async () => {
      await this.#stop()
      await this.#start()
    })
  }

  /**
   * Fencing: stops the process (SIGTERM, SIGKILL after `graceMs`) and refuses every start,
   * explicit or after a crash, until `unfence()`. `chain.wanted` is kept: the chain that ran
   * runs again once the agent reaches a gateway. Returns whether a process was stopped.
   */
  fence(graceMs: number): Promise<boolean> {
    return this.#enqueue(async () => {
      this.#fenced = true
      const running = this.#child !== undefined
      await this.#stop(graceMs)
      return running
    })
  }

  unfence(): void {
    this.#fenced = false
  }

  get fenced(): boolean {
    return this.#fenced
  }

  /** Stops the process for good (agent shutdown). */
  close(): Promise<void> {
    return this.#enqueue(async () => {
      this.#closed = true
      await this.#stop()
      process.off('exit', this.#onProcessExit)
    })
  }

  /**
   * Stops a chain process left behind by an agent that was killed (found through `chain.pid`,
   * checked against its command line). Returns its pid, if there was one.
   */
  async reapOrphan(): Promise<number | undefined> {
    let recorded: { pid?: unknown; binary?: unknown }
    try {
      recorded = JSON.parse(fs.readFileSync(this.#dir.pidFile, 'utf8')) as typeof recorded
    } catch {
      return undefined
    }
    const pid = recorded.pid
    if (typeof pid !== 'number' || typeof recorded.binary !== 'string' || pid === this.#child?.pid) return undefined
    if (!isProcessAlive(pid) || !commandLineOf(pid)?.includes(recorded.binary)) {
      fs.rmSync(this.#dir.pidFile, { force: true })
      return undefined
    }
    this.#logger.warn({ pid }, 'stopping a chain process left behind by a previous agent')
    signal(pid, 'SIGTERM')
    const deadline = Date.now() + this.#stopGraceMs
    while (isProcessAlive(pid) && Date.now() < deadline) await sleep(25)
    if (isProcessAlive(pid)) signal(pid, 'SIGKILL')
    while (isProcessAlive(pid)) await sleep(25)
    fs.rmSync(this.#dir.pidFile, { force: true })
    return pid
  }

  #enqueue<T>(work: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(work, work)
    this.#queue = next.catch(() => undefined)
    return next
  }

  async #start(): Promise<void> {
    if (this.#closed) throw new Error('the supervisor is closed')
    if (this.#child && !this.#child.stopping) return
    this.#clearRestartTimer()
    this.#crashLoop = false
    this.#restarts = []
    if (!this.#deployment) throw new Error('the node is not configured: no active deployment (send configure first)')
    await this.reapOrphan()
    this.#wantRunning = true
    const child = await this.#launch(this.#deployment, true).catch((err: unknown) => {
      this.#wantRunning = false
      throw err
    })
    const early = await Promise.race([child.exited, sleep(this.#settleMs).then(() => undefined)])
    child.settling = false
    if (early) {
      this.#wantRunning = false
      const output = child.recentOutput.length > 0 ? `; last output: ${child.recentOutput.join(' | ')}` : ''
      throw new Error(`the chain process exited during start (${describeExit(early)})${output}`)
    }
    writeFileAtomic(this.#wantedFile, `${new Date().toISOString()}\n`, 0o600)
  }

  async #stop(graceMs = this.#stopGraceMs): Promise<StopOutcome> {
    this.#wantRunning = false
    this.#crashLoop = false
    this.#clearRestartTimer()
    const child = this.#child
    if (!child) return 'not_running'
    child.stopping = true
    child.proc.kill('SIGTERM')
    const exited = await Promise.race([child.exited, sleep(graceMs).then(() => undefined)])
    if (!exited) {
      this.#logger.warn({ pid: child.pid, grace_ms: graceMs }, 'chain process ignored SIGTERM; sending SIGKILL')
      child.proc.kill('SIGKILL')
      await child.exited
      return 'killed'
    }
    return 'exited'
  }

  async #launch(deployment: ActiveDeployment, settling: boolean): Promise<Running> {
    if (this.#fenced) throw new Error('the chain is fenced: this agent has not reached an agent-gateway within its fence timeout')
    const binary = releaseBinaryPath(this.#dir, deployment.binary_name, deployment.version)
    if (!fs.existsSync(binary)) throw new Error(`release ${deployment.version} of ${deployment.binary_name} is not installed (${binary})`)
    const substitute = (value: string) =>
      value.replaceAll('{data_dir}', this.#dir.dataDir).replaceAll('{config_dir}', this.#dir.configDir).replaceAll('{keys_dir}', this.#dir.keysDir)
    const args = deployment.run.args.map(substitute)
    // Only a few neutral variables pass through: the agent's own environment holds its node token.
    const env: Record<string, string> = {}
    for (const name of INHERITED_ENV) {
      const value = process.env[name]
      if (value !== undefined) env[name] = value
    }
    for (const [name, value] of Object.entries(deployment.run.env)) env[name] = substitute(value)
    const [command, argv] = deployment.run.runtime === 'node' ? [process.execPath, [binary, ...args]] : [binary, args]

    const proc = spawn(command, argv, { cwd: this.#dir.root, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let resolveExit!: (exit: ProcessExit) => void
    const exited = new Promise<ProcessExit>((resolve) => (resolveExit = resolve))
    let exitSeen = false
    const finish = (code: number | null, sig: string | null) => {
      if (exitSeen) return
      exitSeen = true
      resolveExit({ code, signal: sig, at: this.#clock().toISOString() })
    }
    proc.once('exit', (code, sig) => finish(code, sig))
    try {
      await new Promise<void>((resolve, reject) => {
        proc.once('spawn', resolve)
        proc.once('error', reject)
      })
    } catch (err) {
      finish(null, null)
      throw new Error(`cannot start ${binary}: ${(err as Error).message}`)
    }
    proc.on('error', (err) => this.#logger.error({ err }, 'chain process error'))
    const pid = proc.pid as number
    const running: Running = { proc, pid, binary, exited, stopping: false, settling, recentOutput: [] }
    this.#child = running
    this.#pipeOutput(running, 'stdout')
    this.#pipeOutput(running, 'stderr')
    writeFileAtomic(this.#dir.pidFile, `${JSON.stringify({ pid, binary, started_at: this.#clock().toISOString() })}\n`, 0o644)
    this.#logger.info({ pid, binary_name: deployment.binary_name, version: deployment.version }, 'chain process started')
    void exited.then((exit) => this.#onExit(running, exit))
    return running
  }

  #pipeOutput(running: Running, stream: 'stdout' | 'stderr'): void {
    const source = running.proc[stream]
    if (!source) return
    const lines = readline.createInterface({ input: source, crlfDelay: Infinity })
    lines.on('line', (raw) => {
      const line = raw.length > this.#maxLineLength ? `${raw.slice(0, this.#maxLineLength)}…` : raw
      running.recentOutput.push(line.slice(0, 300))
      if (running.recentOutput.length > RECENT_LINES) running.recentOutput.shift()
      this.#logger.info({ chain_pid: running.pid, stream }, line)
    })
  }

  #onExit(running: Running, exit: ProcessExit): void {
    if (this.#child === running) {
      this.#child = undefined
      fs.rmSync(this.#dir.pidFile, { force: true })
    }
    this.#lastExit = exit
    const expected = running.stopping || running.settling || !this.#wantRunning || this.#closed
    this.#logger[expected ? 'info' : 'warn']({ pid: running.pid, code: exit.code, signal: exit.signal }, expected ? 'chain process exited' : 'chain process exited unexpectedly')
    if (!expected) this.#onCrash()
  }

  #onCrash(): void {
    const spec = this.#deployment?.crash_loop ?? { max_restarts: 5, window_seconds: 300 }
    const restarts = this.#restartsInWindow()
    if (restarts >= spec.max_restarts) {
      this.#crashLoop = true
      this.#wantRunning = false
      this.#logger.error({ restarts_in_window: restarts, window_seconds: spec.window_seconds }, 'chain process is crash-looping; not restarting it until an explicit start')
      return
    }
    this.#restarts.push(this.#clock().getTime())
    const delay = Math.min(this.#backoff.initialMs * 2 ** restarts, this.#backoff.maxMs)
    this.#logger.info({ delay_ms: delay, restarts_in_window: restarts + 1 }, 'restarting the chain process')
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined
      void this.#enqueue(async () => {
        if (!this.#wantRunning || this.#child || this.#closed || !this.#deployment) return
        try {
          await this.#launch(this.#deployment, false)
        } catch (err) {
          this.#logger.error({ err }, 'cannot restart the chain process')
          this.#onCrash()
        }
      })
    }, delay)
  }

  #restartsInWindow(): number {
    const windowMs = (this.#deployment?.crash_loop.window_seconds ?? 300) * 1000
    const since = this.#clock().getTime() - windowMs
    this.#restarts = this.#restarts.filter((at) => at > since)
    return this.#restarts.length
  }

  #clearRestartTimer(): void {
    if (this.#restartTimer) clearTimeout(this.#restartTimer)
    this.#restartTimer = undefined
  }
}

function describeExit(exit: ProcessExit): string {
  return exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code ?? 'unknown'}`
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {
    // already gone
  }
}

/** Alive and not a zombie (an orphan reparented to a PID 1 that does not reap stays a zombie). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z'
  } catch (err) {
    // Without /proc (not Linux) the signal test is all there is.
    return !(process.platform === 'linux' && (err as NodeJS.ErrnoException).code === 'ENOENT')
  }
}

function commandLineOf(pid: number): string | undefined {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
  } catch {
    return undefined
  }
}
