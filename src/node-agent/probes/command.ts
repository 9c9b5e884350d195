/**
 * Runs a chain-specific check program: exit 0 is healthy. Its stdout may be JSON
 * `{"sync_status": "...", "metrics": {"name": 1}}`; anything else in it is ignored.
 */
import { spawn } from 'node:child_process'
import type { Readable } from 'node:stream'
import { SYNC_STATUSES_REPORTED } from '../../agent-gateway/protocol.js'
import type { Probe, ProbeReport, ReportedSyncStatus } from './types.js'

export interface CommandProbeSpec {
  command: readonly string[]
  timeout_ms: number
}

export interface CommandProbeOptions {
  cwd: string
  /** The command's whole environment; default: the agent's. */
  env?: Readonly<Record<string, string | undefined>>
}

const MAX_OUTPUT_BYTES = 1024 * 1024
const MAX_ERROR_CHARS = 200

interface Outcome {
  exitCode: number | null
  signal: NodeJS.Signals | null
  timedOut: boolean
  spawnError?: string
  stdout: string
  stderr: string
}

export function createCommandProbe(spec: CommandProbeSpec, options: CommandProbeOptions): Probe {
  const [file, ...args] = spec.command
  if (file === undefined) throw new Error('a command probe needs a command')
  return {
    async check(): Promise<ProbeReport> {
      const outcome = await run(file, args, spec.timeout_ms, options)
      if (outcome.timedOut) return { sync_status: 'unknown', healthy: false, metrics: {}, error: `no result within ${spec.timeout_ms} ms` }
      if (outcome.spawnError !== undefined) return { sync_status: 'unknown', healthy: false, metrics: {}, error: outcome.spawnError }
      const reported = parseStdout(outcome.stdout)
      if (outcome.exitCode === 0) return { sync_status: reported.sync_status ?? 'unknown', healthy: true, metrics: reported.metrics }
      const firstLine = outcome.stderr.split('\n').find((line) => line.trim().length > 0)?.trim()
      return {
        sync_status: reported.sync_status ?? 'unknown',
        healthy: false,
        metrics: reported.metrics,
        error: firstLine ? firstLine.slice(0, MAX_ERROR_CHARS) : outcome.signal ? `killed by ${outcome.signal}` : `exited with code ${outcome.exitCode ?? 'unknown'}`,
      }
    },
  }
}

function run(file: string, args: string[], timeoutMs: number, options: CommandProbeOptions): Promise<Outcome> {
  return new Promise((resolve) => {
    // Its own process group, so a timeout also ends whatever the check started (a shell
    // script's children would otherwise keep the output pipes, and this check, open).
    const child = spawn(file, args, { cwd: options.cwd, env: options.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true })
    const stdout = collect(child.stdout)
    const stderr = collect(child.stderr)
    let timedOut = false
    let spawnError: string | undefined
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL')
      } catch {
        // already gone
      }
    }
    const timer = setTimeout(() => {
      timedOut = true
      killGroup()
    }, timeoutMs)
    const tooMuch = () => {
      spawnError = `printed more than ${MAX_OUTPUT_BYTES} bytes`
      killGroup()
    }
    stdout.onOverflow = tooMuch
    stderr.onOverflow = tooMuch
    child.on('error', (err: NodeJS.ErrnoException) => {
      spawnError = `cannot run ${file}: ${err.code ?? err.message}`
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ exitCode: code, signal, timedOut, spawnError, stdout: stdout.text(), stderr: stderr.text() })
    })
  })
}

function collect(stream: Readable): { text(): string; onOverflow?: () => void } {
  const chunks: Buffer[] = []
  let size = 0
  const sink: { text(): string; onOverflow?: () => void } = { text: () => Buffer.concat(chunks).toString('utf8') }
  stream.on('data', (chunk: Buffer) => {
    size += chunk.length
    if (size > MAX_OUTPUT_BYTES) sink.onOverflow?.()
    else chunks.push(chunk)
  })
  return sink
}

function parseStdout(stdout: string): { sync_status?: ReportedSyncStatus; metrics: Record<string, number> } {
  let parsed: unknown
  try {
    parsed = JSON.parse(stdout)
  } catch {
    return { metrics: {} }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { metrics: {} }
  const { sync_status: status, metrics } = parsed as { sync_status?: unknown; metrics?: unknown }
  const sync_status = (SYNC_STATUSES_REPORTED as readonly unknown[]).includes(status) ? (status as ReportedSyncStatus) : undefined
  const numbers: Record<string, number> = {}
  if (typeof metrics === 'object' && metrics !== null && !Array.isArray(metrics)) {
    for (const [name, value] of Object.entries(metrics)) if (typeof value === 'number' && Number.isFinite(value)) numbers[name] = value
  }
  return sync_status === undefined ? { metrics: numbers } : { sync_status, metrics: numbers }
}
