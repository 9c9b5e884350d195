/**
 * A real Litecoin Core node for tests: Debian's `litecoind` (scripts/ensure-test-deps.sh installs
 * it) in -regtest, offline (no peers, no DNS seeds, not listening for peers), RPC on a loopback
 * port with cookie authentication. `stop()` ends it (SIGTERM, then SIGKILL) and is safe to call twice.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
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
  const rpc = <T>(method: string, params: unknown[] = [], wallet?: string): Promise<T> => cookieRpc<T>(url, cookieFile, method, params, wallet)
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

/**
 * JSON-RPC to the litecoind a node agent runs, as a user on its host would call it: the port from
 * the node's config/litecoin.conf and the cookie litecoind wrote at its last start, read for each
 * call (a restarted node has a new one). `wallet` addresses a loaded wallet (`/wallet/<name>`).
 */
export async function nodeRpc<T>(stateDir: string, method: string, params: unknown[] = [], wallet?: string): Promise<T> {
  const port = /^rpcport=(\d+)$/m.exec(fs.readFileSync(path.join(stateDir, 'config', 'litecoin.conf'), 'utf8'))?.[1]
  return cookieRpc<T>(`http://127.0.0.1:${port}`, path.join(stateDir, 'data', 'regtest', '.cookie'), method, params, wallet)
}

/** A Bitcoin Core style JSON-RPC call with cookie authentication (the cookie is read per call: a restart writes a new one). */
async function cookieRpc<T>(url: string, cookieFile: string, method: string, params: unknown[], wallet: string | undefined): Promise<T> {
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

/** hash160 of the compressed public key of a WIF private key: the `hdseedid` Bitcoin Core reports for that seed. */
export function hdSeedIdOf(wif: string): string {
  const decoded = base58(wif)
  const payload = decoded.subarray(0, -4)
  const checksum = crypto.createHash('sha256').update(crypto.createHash('sha256').update(payload).digest()).digest().subarray(0, 4)
  if (!checksum.equals(decoded.subarray(-4))) throw new Error('not a WIF key: bad checksum')
  // version byte, 32-byte key, 0x01 (compressed)
  if (payload.length !== 34) throw new Error(`not a compressed WIF key: ${payload.length} bytes`)
  const ecdh = crypto.createECDH('secp256k1')
  ecdh.setPrivateKey(payload.subarray(1, 33))
  const publicKey = ecdh.getPublicKey(null, 'compressed')
  // A uint160 shown the way Bitcoin Core shows hashes: its bytes in reverse.
  return Buffer.from(crypto.createHash('ripemd160').update(crypto.createHash('sha256').update(publicKey).digest()).digest()).reverse().toString('hex')
}

function base58(text: string): Buffer {
  const alphabet = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
  let n = 0n
  for (const c of text) {
    const digit = alphabet.indexOf(c)
    if (digit < 0) throw new Error(`not base58: ${c}`)
    n = n * 58n + BigInt(digit)
  }
  const hex = n.toString(16)
  const bytes = Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex')
  const zeros = text.length - text.replace(/^1+/, '').length
  return Buffer.concat([Buffer.alloc(zeros), bytes])
}
