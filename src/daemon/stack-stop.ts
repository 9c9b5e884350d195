/**
 * `nodeplane down`: stops the `nodeplane up` of a data directory, found through its stack.json,
 * then the local hosts (node agents and their chains) it started, which outlive it on purpose.
 *
 * The pid in stack.json is signalled only while it is still a `nodeplane up` (on Linux its
 * command line says so): after a crash the pid may belong to some other process by now.
 */
import fs from 'node:fs'
import { ConflictError, DomainError } from '../errors.js'
import type { Logger } from '../log.js'
import { existingLocalHosts, type RunningLocalHost } from './local-hosts.js'
import { isProcessAlive, readStackFile, removeStackFile } from './stack-file.js'

/** The stack did not stop within the wait (exit 1). */
export class StopTimeoutError extends DomainError {
  readonly status = 500
  readonly code = 'stop_timeout'
}

export interface StopStackResult {
  /** The `up` that was stopped; null when none ran (`stale_stack_file` when its stack.json was left behind). */
  stack: { pid: number; api_url: string } | null
  stale_stack_file: boolean
}

/** A live process, not a zombie waiting for its parent. */
function isRunning(pid: number): boolean {
  if (!isProcessAlive(pid)) return false
  try {
    return !/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return true
  }
}

/** This binary as a process's argv shows it: `…/bin/run.js` (or dev.js), or a `nodeplane` on PATH. */
const NODEPLANE_ENTRY = /(^|\/)(nodeplane|bin\/run\.js|bin\/dev\.js)$/

/**
 * Whether the process is a `nodeplane up` (true where /proc cannot say): this binary's entry
 * followed by `up`, so a reused pid now running `docker compose up` is not taken for it.
 */
function isNodeplaneUp(pid: number): boolean {
  let argv: string[]
  try {
    argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
  } catch {
    return true
  }
  const entry = argv.findIndex((arg) => NODEPLANE_ENTRY.test(arg))
  return entry >= 0 && argv[entry + 1] === 'up'
}

export async function stopStack(dataDir: string, timeoutMs: number): Promise<StopStackResult> {
  const stack = readStackFile(dataDir)
  if (!stack) return { stack: null, stale_stack_file: false }
  if (!isRunning(stack.pid)) {
    removeStackFile(dataDir, stack.pid)
    return { stack: null, stale_stack_file: true }
  }
  if (!isNodeplaneUp(stack.pid)) {
    throw new ConflictError(
      `${dataDir}/stack.json names pid ${stack.pid}, which is not a nodeplane up (the stack crashed and the pid was reused)`,
      `nothing was signalled; remove ${dataDir}/stack.json`,
    )
  }
  try {
    process.kill(stack.pid, 'SIGTERM')
  } catch (err) {
    throw new ConflictError(`cannot signal pid ${stack.pid} named in ${dataDir}/stack.json: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, 'stop it as the user who started it')
  }
  const deadline = Date.now() + timeoutMs
  while (isRunning(stack.pid)) {
    if (Date.now() > deadline) {
      throw new StopTimeoutError(`nodeplane up (pid ${stack.pid}) did not stop within ${Math.round(timeoutMs / 1000)} s`, `it may still be draining; \`kill -9 ${stack.pid}\` ends it at once`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { stack: { pid: stack.pid, api_url: stack.api_url }, stale_stack_file: false }
}

/** Stops every running local host under `root`; their directories (the chains' data) stay. */
export async function stopLocalHosts(root: string, logger: Logger): Promise<RunningLocalHost[]> {
  const provider = existingLocalHosts(root, logger)
  if (!provider) return []
  const running = provider.runningHosts()
  for (const host of running) await provider.stopHost(host.host_id)
  return running
}
