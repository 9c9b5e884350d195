/**
 * A real Litecoin Core node for tests: Debian's `litecoind` (scripts/ensure-test-deps.sh installs
 * it) in -regtest, offline (no peers, no DNS seeds, not listening for peers), RPC on a loopback
 * port with cookie authentication. `stop()` ends it (SIGTERM, then SIGKILL) and is safe to call twice.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { freePort, waitFor } from './ports.js'

/** The ELF binary Debian's package installs (/usr/bin/litecoind is a wrapper script; docs/chains.md). */
export const LITECOIND = '/usr/lib/litecoin/litecoind'

export function assertLitecoindInstalled(): void {
  if (!fs.existsSync(LITECOIND)) throw new Error(`${LITECOIND} is missing: install Debian's litecoind (scripts/ensure-test-deps.sh does)`)
}

export interface RunningLitecoind {
  rpcPort: number
  dataDir: string
  /** `<dataDir>/regtest/.cookie` */
  cookieFile: string
  url: string
  rpc<T = unknown>(method: string, params?: unknown[], wallet?: string): Promise<T>
  stop(): Promise<void>
}

export async function startLitecoind(dataDir: string, options: { rpcPort?: number } = {}): Promise<RunningLitecoind> {
  assertLitecoindInstalled()
  fs.mkdirSync(dataDir, { recursive: true })
  const rpcPort = options.rpcPort ?? (await freePort())
  const child: ChildProcess = spawn(
    LITECOIND,
    ['-regtest', `-datadir=${dataDir}`, '-server', '-listen=0', '-dnsseed=0', '-rpcbind=127.0.0.1', '-rpcallowip=127.0.0.1', `-rpcport=${rpcPort}`, '-printtoconsole=0'],
    { stdio: 'ignore' },
  )
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const cookieFile = path.join(dataDir, 'regtest', '.cookie')
  const url = `http://127.0.0.1:${rpcPort}`
  async function rpc<T>(method: string, params: unknown[] = [], wallet?: string): Promise<T> {
    const cookie = fs.readFileSync(cookieFile, 'utf8').trim()
    const response = await fetch(`${url}${wallet ? `/wallet/${wallet}` : '/'}`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(cookie).toString('base64')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '1.0', id: 0, method, params }),
    })
    const answer = (await response.json()) as { result: T; error: { code: number; message: string } | null }
    if (answer.error) throw new Error(`${method}: ${answer.error.code} ${answer.error.message}`)
    return answer.result
  }
  let stopping: Promise<void> | undefined
  const stop = () =>
    (stopping ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const killer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(killer)
    })())
  try {
    const outcome = await waitFor(
      async () => {
        if (child.exitCode !== null) return 'exited'
        try {
          return await rpc('getblockcount').then(() => 'up')
        } catch {
          return false
        }
      },
      'litecoind to answer RPC',
      30_000,
      100,
    )
    if (outcome === 'exited') throw new Error(`litecoind exited with code ${child.exitCode} before it answered RPC`)
  } catch (err) {
    await stop()
    throw err
  }
  return { rpcPort, dataDir, cookieFile, url, rpc, stop }
}
