/**
 * A daemon whose stdout reader died (journald restarted under systemd) still stops on SIGTERM:
 * the real binary, a stdout pipe whose read end is closed once the daemon is ready, then SIGTERM.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { BIN, cleanEnv, tempDir, upPorts } from '../helpers/cli.js'
import { createTestDatabase, type TestDatabase } from '../helpers/db.js'
import { startNats, type NatsServer } from '../helpers/nats.js'

const SHUTDOWN_TIMEOUT_MS = 5_000
/** Room for the process to notice the signal and exit once its graceful stop has given up. */
const EXIT_MARGIN_MS = 5_000

interface Exit {
  code: number | null
  signal: NodeJS.Signals | null
}

/** Spawns node with stdout on a pipe; `ready` resolves once it logged `ready` (or rejects when it exits first). */
function spawnWithLogPipe(nodeArgs: string[], env: Record<string, string>): { child: ChildProcess; exited: Promise<Exit>; ready: Promise<void>; stderr: () => string } {
  const child = spawn('node', nodeArgs, { env: cleanEnv({ SHUTDOWN_TIMEOUT: `${SHUTDOWN_TIMEOUT_MS}ms`, ...env }), cwd: os.tmpdir(), stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const exited = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const ready = new Promise<void>((resolve, reject) => {
    let out = ''
    const onData = (chunk: Buffer) => {
      out += chunk.toString()
      if (out.split('\n').some((line) => line.includes('"msg":"ready"'))) {
        child.stdout?.off('data', onData)
        resolve()
      }
    }
    child.stdout?.on('data', onData)
    void exited.then((exit) => reject(new Error(`${nodeArgs.slice(-2).join(' ')} exited before it was ready (${exit.code ?? exit.signal}): ${stderr}`)))
  })
  return { child, exited, ready, stderr: () => stderr }
}

/**
 * The compiled logger and installShutdown alone, with a stop that finishes at once: the lines
 * logged right before the exit are the first ones after the reader died (a single daemon's
 * logger meets the broken pipe this way; `up`, with one stream per daemon, every time).
 */
const DIST = path.resolve(path.dirname(BIN), '../dist/src')
const LOGGER_SCRIPT = `
import { createLogger } from ${JSON.stringify(pathToFileURL(path.join(DIST, 'log.js')).href)}
import { installShutdown } from ${JSON.stringify(pathToFileURL(path.join(DIST, 'daemon/shutdown.js')).href)}
const logger = createLogger({ daemon: 'test' })
installShutdown({ logger, timeoutMs: ${SHUTDOWN_TIMEOUT_MS}, stop: async () => {} })
setInterval(() => {}, 60_000)
logger.info('ready')
`

/** The exit within `ms`, or undefined (the process is then killed). */
async function exitWithin(child: ChildProcess, exited: Promise<Exit>, ms: number): Promise<Exit | undefined> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)))
  const exit = await Promise.race([exited, late])
  clearTimeout(timer)
  if (!exit) {
    child.kill('SIGKILL')
    await exited
  }
  return exit
}

/** Closes the read end of the daemon's stdout, as a dead log reader does, then sends SIGTERM. */
async function terminateWithoutLogReader(run: ReturnType<typeof spawnWithLogPipe>): Promise<Exit | undefined> {
  await run.ready
  run.child.stdout?.destroy()
  run.child.kill('SIGTERM')
  return exitWithin(run.child, run.exited, SHUTDOWN_TIMEOUT_MS + EXIT_MARGIN_MS)
}

describe('SIGTERM when the log reader is gone', () => {
  const children: ChildProcess[] = []
  let nats: NatsServer | undefined
  let database: TestDatabase | undefined

  beforeAll(async () => {
    nats = await startNats()
    database = await createTestDatabase('sqlite')
  })
  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  afterAll(async () => {
    await database?.destroy()
    await nats?.destroy()
  })

  it('nodeplane up exits with 143 within its shutdown timeout', async () => {
    const run = spawnWithLogPipe([BIN, 'up', '--data-dir', path.join(tempDir(), 'data')], { ...(await upPorts()) })
    children.push(run.child)
    const exit = await terminateWithoutLogReader(run)
    expect(exit, `still running ${SHUTDOWN_TIMEOUT_MS + EXIT_MARGIN_MS} ms after SIGTERM; stderr: ${run.stderr()}`).toEqual({ code: 143, signal: null })
  })

  it('a daemon logger whose last lines before the exit meet the broken pipe exits with 143', async () => {
    const run = spawnWithLogPipe(['--input-type=module', '-e', LOGGER_SCRIPT], {})
    children.push(run.child)
    const exit = await terminateWithoutLogReader(run)
    expect(exit, `still running ${SHUTDOWN_TIMEOUT_MS + EXIT_MARGIN_MS} ms after SIGTERM; stderr: ${run.stderr()}`).toEqual({ code: 143, signal: null })
  })

  it('nodeplane daemon health-evaluator exits with 143 within its shutdown timeout', async () => {
    if (!database || !nats) throw new Error('setup failed')
    const run = spawnWithLogPipe([BIN, 'daemon', 'health-evaluator'], { DATABASE_URL: database.url, NATS_URL: nats.url })
    children.push(run.child)
    const exit = await terminateWithoutLogReader(run)
    expect(exit, `still running ${SHUTDOWN_TIMEOUT_MS + EXIT_MARGIN_MS} ms after SIGTERM; stderr: ${run.stderr()}`).toEqual({ code: 143, signal: null })
  })
})
