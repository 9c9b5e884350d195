/** Runs the real binary (bin/run.js over the compiled dist/) as a child process. */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { execa, type ResultPromise } from 'execa'
import { freePort, waitFor } from './ports.js'

export const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/run.js')

export interface CliResult {
  exitCode: number
  stdout: string
  stderr: string
}

/**
 * Environment without the caller's nodeplane variables, so tests never touch a real setup, and
 * without vitest's NODE_ENV=test: with it oclif loads the TypeScript compiler into every
 * `nodeplane` process (about 0.7 s of CPU per CLI call and per daemon start), which no user's has.
 */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined || key === 'NODE_ENV') continue
    if (/^(NODEPLANE_|DATABASE_URL|PAYMENTS_DATABASE_URL|NATS_URL|LOG_LEVEL|AUTH_|API_|HTTP_|PAYMENT_|AGENT_GATEWAY_)/.test(key)) continue
    env[key] = value
  }
  return { ...env, ...extra }
}

/** Free ports for every server `nodeplane up` starts, so parallel tests never collide on defaults. */
export interface UpPorts {
  API_SERVER_PORT: string
  AUTH_SERVER_PORT: string
  AGENT_GATEWAY_PORT: string
  PAYMENT_GRPC_PORT: string
  PAYMENT_HTTP_PORT: string
  PAYMENT_METRICS_PORT: string
  RPC_GATEWAY_PORT: string
  [variable: string]: string
}

export async function upPorts(): Promise<UpPorts> {
  return {
    API_SERVER_PORT: String(await freePort()),
    AUTH_SERVER_PORT: String(await freePort()),
    AGENT_GATEWAY_PORT: String(await freePort()),
    PAYMENT_GRPC_PORT: String(await freePort()),
    PAYMENT_HTTP_PORT: String(await freePort()),
    PAYMENT_METRICS_PORT: String(await freePort()),
    RPC_GATEWAY_PORT: String(await freePort()),
  }
}

export async function nodeplane(args: string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<CliResult> {
  const result = await execa('node', [BIN, ...args], {
    env: cleanEnv(options.env),
    extendEnv: false,
    cwd: options.cwd ?? os.tmpdir(),
    reject: false,
    timeout: 60_000,
  })
  return { exitCode: result.exitCode ?? -1, stdout: String(result.stdout), stderr: String(result.stderr) }
}

export function spawnNodeplane(args: string[], options: { env?: Record<string, string>; cwd?: string } = {}): ResultPromise {
  return execa('node', [BIN, ...args], {
    env: cleanEnv(options.env),
    extendEnv: false,
    cwd: options.cwd ?? os.tmpdir(),
    reject: false,
    all: true,
  })
}

export { tempDir } from './temp-dirs.js'

export async function waitForFile<T>(file: string, what: string, timeoutMs = 30_000): Promise<T> {
  return waitFor(async () => (fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as T) : undefined), what, timeoutMs, 100)
}

export interface DaemonLogLine {
  daemon?: string
  msg?: string
  level?: string
  [key: string]: unknown
}

/** The pino JSON lines a daemon printed (stdout and stderr interleaved in `all`). */
export function jsonLogLines(output: unknown): DaemonLogLine[] {
  return String(output)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as DaemonLogLine)
}
