import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { jsonLogLines, spawnNodeplane, tempDir } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { freePort, waitFor } from '../helpers/ports.js'

/**
 * systemd's side of sd_notify, played by python3 (Node.js has no unix datagram sockets): it binds
 * the NOTIFY_SOCKET, and for every datagram prints its text and whether the daemon's port accepts
 * a connection at that moment, as one JSON line.
 */
const NOTIFY_LISTENER = `
import json, socket, sys
path, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print(json.dumps({"listening": True}), flush=True)
while True:
    data = s.recv(4096).decode()
    c = socket.socket()
    try:
        c.connect(("127.0.0.1", port)); open_ = True
    except OSError:
        open_ = False
    finally:
        c.close()
    print(json.dumps({"message": data, "port_open": open_}), flush=True)
`

interface Notification {
  message: string
  port_open: boolean
}

/** A NOTIFY_SOCKET listener; `stop()` kills it. */
async function startNotifyListener(socketPath: string, port: number): Promise<{ received: Notification[]; stop(): void }> {
  const child: ChildProcessWithoutNullStreams = spawn('python3', ['-c', NOTIFY_LISTENER, socketPath, String(port)])
  const received: Notification[] = []
  let listening = false
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const parsed = JSON.parse(line) as Notification & { listening?: boolean }
    if (parsed.listening) listening = true
    else received.push(parsed)
  })
  const stop = () => {
    if (child.exitCode === null) child.kill('SIGKILL')
  }
  try {
    await waitFor(async () => listening, 'the notify listener to bind')
  } catch (err) {
    stop()
    throw err
  }
  return { received, stop }
}

describe.each(DIALECTS)('systemd readiness of a daemon (%s)', (dialect) => {
  let database: TestDatabase
  beforeAll(async () => {
    database = await createTestDatabase(dialect)
  })
  afterAll(async () => {
    await database?.destroy()
  })

  it('sends READY=1 over NOTIFY_SOCKET only once its port accepts connections, and STOPPING=1 on SIGTERM', async () => {
    const dir = tempDir()
    const port = await freePort()
    const socketPath = path.join(dir, 'notify.sock')
    const listener = await startNotifyListener(socketPath, port)
    const child = spawnNodeplane(['daemon', 'auth-server'], {
      env: { DATABASE_URL: database.url, NODEPLANE_DATA_DIR: dir, AUTH_SERVER_PORT: String(port), AUTH_PROVIDER: 'siwe', NOTIFY_SOCKET: socketPath },
    })
    try {
      const ready = await waitFor(async () => listener.received.find((n) => n.message.split('\n').includes('READY=1')), 'READY=1 from the auth-server')
      expect(ready.port_open).toBe(true)
      expect(listener.received.some((n) => n.message.includes('STOPPING=1'))).toBe(false)
      child.kill('SIGTERM')
      await waitFor(async () => listener.received.some((n) => n.message.split('\n').includes('STOPPING=1')), 'STOPPING=1 from the auth-server')
    } finally {
      child.kill('SIGTERM')
      listener.stop()
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    // READY=1 came after the "ready" line, from the daemon that logged it.
    const lines = jsonLogLines(result.all)
    expect(lines.some((l) => l.msg === 'ready')).toBe(true)
    expect(lines.some((l) => String(l.msg).startsWith('could not notify systemd'))).toBe(false)
  })

  it('without a notify socket to reach, logs what is wrong and still serves', async () => {
    const dir = tempDir()
    const port = await freePort()
    const missing = path.join(dir, 'no-such.sock')
    const child = spawnNodeplane(['daemon', 'auth-server'], {
      env: { DATABASE_URL: database.url, NODEPLANE_DATA_DIR: dir, AUTH_SERVER_PORT: String(port), AUTH_PROVIDER: 'siwe', NOTIFY_SOCKET: missing },
    })
    let output = ''
    child.all?.on('data', (chunk: Buffer) => (output += chunk.toString()))
    try {
      await waitFor(async () => output.includes('could not notify systemd'), 'the notify failure to be logged')
      expect((await fetch(`http://127.0.0.1:${port}/health`)).ok).toBe(true)
    } finally {
      child.kill('SIGTERM')
    }
    const result = await child
    expect(result.exitCode).toBe(143)
    const failure = jsonLogLines(result.all).find((l) => String(l.msg).startsWith('could not notify systemd'))
    expect(failure?.state).toBe('READY=1')
    expect(fs.existsSync(missing)).toBe(false)
  })
})
