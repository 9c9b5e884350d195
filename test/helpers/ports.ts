import fs from 'node:fs'
import net from 'node:net'
import { isMainThread } from 'node:worker_threads'

/**
 * A port free on 127.0.0.1 for a server the test is about to start. Not from the kernel's
 * ephemeral range: a port picked there and released can be taken before the server binds it by
 * the local end of any outgoing connection on the machine (CI saw `nodeplane up` refuse a port
 * the test had just found free). Each vitest worker takes its own slice below that range, so two
 * workers never pick the same port either; the bind check skips one some other program holds.
 */
export async function freePort(): Promise<number> {
  if (EPHEMERAL_START < SLICES_START + SLICES * SLICE) return kernelPort()
  for (let tries = 0; tries < SLICE; tries += 1) {
    const port = sliceStart + (nextInSlice++ % SLICE)
    if (await bindable(port)) return port
  }
  throw new Error(`no free port in ${sliceStart}-${sliceStart + SLICE - 1}`)
}

const SLICES_START = 20_000
const SLICE = 3_000
const SLICES = 4
const EPHEMERAL_START = ephemeralRangeStart()
// The forks and the threads pool (vitest.config.ts) number their workers 1 and 2 each: the
// threads' workers take the two slices above the forks'.
const sliceStart = SLICES_START + ((Number(process.env.VITEST_POOL_ID ?? process.pid) + (isMainThread ? 0 : 2)) % SLICES) * SLICE
// A file after another in the same worker starts elsewhere in the slice.
let nextInSlice = Math.floor(Math.random() * SLICE)

function ephemeralRangeStart(): number {
  try {
    return Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 0
  } catch {
    return 0
  }
}

/** The first of `count` consecutive free ports (`nodeplane up --port-base`), from the worker's slice. */
export async function freePortRange(count: number): Promise<number> {
  for (let tries = 0; tries < 100; tries += 1) {
    const base = await freePort()
    let free = true
    for (let i = 1; i < count && free; i += 1) free = await bindable(base + i)
    nextInSlice += count
    if (free) return base
  }
  throw new Error(`no ${count} consecutive free ports`)
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer()
    server.unref()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}

/** Polls `probe` until it resolves truthy or the deadline passes. */
export async function waitFor<T>(probe: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 20_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  while (Date.now() < deadline) {
    try {
      const value = await probe()
      if (value) return value
    } catch (err) {
      lastError = err
    }
    await new Promise((r) => setTimeout(r, everyMs))
  }
  throw new Error(`timed out waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`)
}
