/** A `nodeplane daemon <name>` process for a benchmark, ready when its /readyz answers 200. */
import { spawn, type ChildProcess } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { waitFor } from '../test/helpers/ports.js'

const BIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'run.js')

export interface BenchDaemon {
  child: ChildProcess
  stop(): Promise<void>
}

/**
 * `ready`: the port whose /readyz must answer 200, or a probe for a daemon without HTTP (the
 * orchestrator). `nodeArgs`: options for node itself, e.g. `--cpu-prof` to profile the daemon
 * under a benchmark's load.
 */
export async function startBenchDaemon(name: string, env: Record<string, string>, ready: number | (() => Promise<boolean>), nodeArgs: string[] = []): Promise<BenchDaemon> {
  const child = spawn(process.execPath, [...nodeArgs, BIN, 'daemon', name], { env: { ...process.env, ...env }, cwd: os.tmpdir(), stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-4000)))
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
    await exited
  }
  try {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}: ${stderr}`)
        if (typeof ready === 'function') return ready()
        return (await fetch(`http://127.0.0.1:${ready}/readyz`).catch(() => undefined))?.ok === true
      },
      `the ${name} to be ready`,
      30_000,
      100,
    )
  } catch (err) {
    await stop()
    throw err
  }
  return { child, stop }
}
