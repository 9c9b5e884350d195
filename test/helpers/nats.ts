/**
 * Starts a real `nats-server` (Debian package) with JetStream in a temp store dir on a free
 * port. `stop()`/`start()` take the same server down and back up on the same port and store,
 * for "NATS is down for a while" tests; `destroy()` stops it for good.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { freePort, waitFor } from './ports.js'

export interface NatsServer {
  url: string
  port: number
  start(): Promise<void>
  stop(): Promise<void>
  destroy(): Promise<void>
}

export function natsServerBinary(): string {
  const candidates = [process.env.NATS_SERVER_BIN, '/usr/sbin/nats-server', '/usr/bin/nats-server', '/usr/local/bin/nats-server']
  const found = candidates.find((c): c is string => !!c && fs.existsSync(c))
  if (!found) throw new Error('nats-server not found (apt-get install -y nats-server)')
  return found
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => (socket.destroy(), resolve(true)))
    socket.once('error', () => resolve(false))
  })
}

export async function startNats(): Promise<NatsServer> {
  const external = process.env.TEST_NATS_URL
  if (external) {
    return { url: external, port: Number(new URL(external).port), start: async () => {}, stop: async () => {}, destroy: async () => {} }
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-nats-'))
  const port = await freePort()
  const binary = natsServerBinary()
  let child: ChildProcess | undefined

  const start = async () => {
    if (child) return
    const proc = spawn(binary, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir, '-l', path.join(dir, 'server.log')], {
      stdio: 'ignore',
    })
    child = proc
    proc.once('exit', () => {
      if (child === proc) child = undefined
    })
    await waitFor(() => portOpen(port), 'nats-server to listen')
  }
  const stop = async () => {
    const proc = child
    if (!proc) return
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
    proc.kill('SIGTERM')
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000)
    await exited
    clearTimeout(timer)
    child = undefined
  }
  await start()
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    start,
    stop,
    async destroy() {
      await stop()
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}
