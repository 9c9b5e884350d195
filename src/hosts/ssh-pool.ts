/**
 * SSH to the fleet's hosts (docs/infrastructure.md, "SSH"), on `ssh2`.
 *
 * One connection per host, opened on first use and reused by every command after it; at most
 * `maxSessionsPerHost` commands run on a host at once (OpenSSH's MaxSessions is 10; we stay well
 * under), and at most `maxConnecting` handshakes run at once across the fleet, so a probe of a
 * thousand hosts does not open a thousand TCP connections in the same instant. A connection that
 * closes or errors is dropped from the pool; the next command opens a new one.
 *
 * Host-key pinning: a target carries the fingerprint recorded when the host was added; a server
 * presenting any other key is refused before authentication (`hostVerifier`), with an error naming
 * both fingerprints. A target without a pin (only `host add`'s first connection) accepts the key
 * and reports its fingerprint, which the caller then pins.
 */
import crypto from 'node:crypto'
// ssh2 is CommonJS: Node's ESM loader gives its exports only through the default import.
import ssh2, { type Client, type ConnectConfig } from 'ssh2'

export interface SshTarget {
  /** Pool key: the host's id (or a name before it has one). */
  id: string
  address: string
  port: number
  user: string
  /** The private key (OpenSSH or PEM text). Never logged. */
  privateKey: string
  /** `SHA256:…`; undefined only for the first connection of `host add`. */
  hostKeyFingerprint?: string | undefined
}

export interface ExecResult {
  code: number | null
  signal: string | null
  stdout: string
  stderr: string
}

export interface ExecOptions {
  timeoutMs?: number
  /** Written to the command's stdin, which is then closed (it is closed at once without it). */
  stdin?: Buffer | string
}

export interface SshPoolOptions {
  /** TCP connect plus SSH handshake (default 10 s). */
  connectTimeoutMs?: number
  /** Default limit for one command (default 30 s). */
  execTimeoutMs?: number
  maxSessionsPerHost?: number
  maxConnecting?: number
}

/** The host presented another key than the pinned one: possibly another machine on that address. */
export class HostKeyMismatchError extends Error {
  constructor(
    readonly expected: string,
    readonly presented: string,
    where: string,
  ) {
    super(`the SSH host key of ${where} changed: pinned ${expected}, presented ${presented}; if the host was reinstalled on purpose, remove the host and add it again with --host-key-fingerprint ${presented}`)
    this.name = 'HostKeyMismatchError'
  }
}

/** Could not connect or authenticate (the message says which). */
export class SshConnectError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'SshConnectError'
  }
}

export class SshTimeoutError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'SshTimeoutError'
  }
}

/** OpenSSH's fingerprint of a host key blob: `SHA256:` and unpadded base64 of its SHA-256. */
export function sshFingerprint(keyBlob: Buffer): string {
  return `SHA256:${crypto.createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`
}

export const FINGERPRINT_PATTERN = /^SHA256:[A-Za-z0-9+/]{43}$/

class Semaphore {
  private active = 0
  private readonly waiting: Array<() => void> = []
  constructor(private readonly limit: number) {}
  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve))
    this.active += 1
    try {
      return await work()
    } finally {
      this.active -= 1
      this.waiting.shift()?.()
    }
  }
}

interface PooledHost {
  connection?: Promise<{ client: Client; fingerprint: string }> | undefined
  sessions: Semaphore
  /** The pin the open connection was verified against; a changed pin reconnects. */
  pin: string | undefined
}

export interface SshPool {
  /** Runs one command; rejects on connect failure, host key mismatch or timeout (a non-zero exit is a result). */
  exec(target: SshTarget, command: string, options?: ExecOptions): Promise<ExecResult>
  /** Connects (or reuses the connection) and returns the host key's fingerprint it presented. */
  connect(target: SshTarget): Promise<string>
  /** Closes the host's connection (its key or address changed, or it was removed). */
  drop(id: string): void
  close(): Promise<void>
}

export function createSshPool(options: SshPoolOptions = {}): SshPool {
  const connectTimeoutMs = options.connectTimeoutMs ?? 10_000
  const execTimeoutMs = options.execTimeoutMs ?? 30_000
  const connecting = new Semaphore(options.maxConnecting ?? 16)
  const hosts = new Map<string, PooledHost>()

  const open = (target: SshTarget): Promise<{ client: Client; fingerprint: string }> =>
    connecting.run(
      () =>
        new Promise((resolve, reject) => {
          const client = new ssh2.Client()
          let presented: string | undefined
          let settled = false
          const where = `${target.address}:${target.port}`
          const fail = (err: Error) => {
            if (settled) return
            settled = true
            client.end()
            reject(err)
          }
          const config: ConnectConfig = {
            host: target.address,
            port: target.port,
            username: target.user,
            privateKey: target.privateKey,
            readyTimeout: connectTimeoutMs,
            keepaliveInterval: 15_000,
            keepaliveCountMax: 3,
            hostVerifier: (key: Buffer) => {
              presented = sshFingerprint(key)
              return target.hostKeyFingerprint === undefined || presented === target.hostKeyFingerprint
            },
          }
          client.once('ready', () => {
            settled = true
            resolve({ client, fingerprint: presented ?? '' })
          })
          client.on('error', (err: Error & { level?: string }) => {
            if (presented !== undefined && target.hostKeyFingerprint !== undefined && presented !== target.hostKeyFingerprint) {
              fail(new HostKeyMismatchError(target.hostKeyFingerprint, presented, where))
            } else if (err.level === 'client-authentication') {
              fail(new SshConnectError(`${target.user}@${where} refused the SSH key (authentication failed); check --user and that the key's public half is in the host's authorized_keys`))
            } else if (/timed out/i.test(err.message)) {
              fail(new SshConnectError(`${where} did not complete an SSH handshake within ${connectTimeoutMs} ms (unreachable, or not an SSH server)`))
            } else {
              fail(new SshConnectError(`cannot reach ${where} over SSH: ${err.message}`))
            }
          })
          client.on('close', () => fail(new SshConnectError(`${where} closed the SSH connection before it was ready`)))
          try {
            client.connect(config)
          } catch (err) {
            fail(new SshConnectError(`cannot use the SSH key for ${where}: ${(err as Error).message}`))
          }
        }),
    )

  const connection = (target: SshTarget): Promise<{ client: Client; fingerprint: string }> => {
    let pooled = hosts.get(target.id)
    if (!pooled) {
      pooled = { sessions: new Semaphore(options.maxSessionsPerHost ?? 4), pin: target.hostKeyFingerprint }
      hosts.set(target.id, pooled)
    }
    if (pooled.connection && pooled.pin !== target.hostKeyFingerprint) {
      void pooled.connection.then(({ client }) => client.end(), () => undefined)
      pooled.connection = undefined
    }
    if (pooled.connection) return pooled.connection
    const entry = pooled
    const made = open(target)
    entry.pin = target.hostKeyFingerprint
    entry.connection = made
    const forget = () => {
      if (entry.connection === made) entry.connection = undefined
    }
    made.then(({ client }) => client.once('close', forget), forget)
    return made
  }

  const runCommand = (client: Client, command: string, timeoutMs: number, where: string, stdin: Buffer | string | undefined): Promise<ExecResult> =>
    new Promise((resolve, reject) => {
      const stdout: Buffer[] = []
      const stderr: Buffer[] = []
      let done = false
      const timer = setTimeout(() => {
        if (done) return
        done = true
        // The channel closes; ending the whole connection too makes sure nothing keeps running on our side.
        client.end()
        reject(new SshTimeoutError(`a command on ${where} did not finish within ${timeoutMs} ms`))
      }, timeoutMs)
      client.exec(command, (err, stream) => {
        if (err) {
          clearTimeout(timer)
          done = true
          reject(new SshConnectError(`cannot run a command on ${where}: ${err.message}`))
          return
        }
        let code: number | null = null
        let signal: string | null = null
        stream.on('exit', (c: number | null, s?: string) => {
          code = c
          signal = s ?? null
        })
        stream.on('data', (chunk: Buffer) => stdout.push(chunk))
        stream.stderr.on('data', (chunk: Buffer) => stderr.push(chunk))
        // A command that reads stdin must see its end, or it would wait for the timeout.
        stream.end(stdin)
        stream.on('close', () => {
          clearTimeout(timer)
          if (done) return
          done = true
          resolve({ code, signal, stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8') })
        })
      })
    })

  const pooledOf = (target: SshTarget): PooledHost => {
    void connection(target).catch(() => undefined)
    return hosts.get(target.id) as PooledHost
  }

  return {
    async exec(target, command, execOptions = {}) {
      const pooled = pooledOf(target)
      return pooled.sessions.run(async () => {
        const made = connection(target)
        const { client } = await made
        return runCommand(client, command, execOptions.timeoutMs ?? execTimeoutMs, `${target.address}:${target.port}`, execOptions.stdin).catch((err: unknown) => {
          // The timed-out command's connection was ended: the next command opens a new one.
          if (err instanceof SshTimeoutError && pooled.connection === made) pooled.connection = undefined
          throw err
        })
      })
    },
    async connect(target) {
      return (await connection(target)).fingerprint
    },
    drop(id) {
      const pooled = hosts.get(id)
      hosts.delete(id)
      void pooled?.connection?.then(({ client }) => client.end(), () => undefined)
    },
    async close() {
      const all = [...hosts.values()]
      hosts.clear()
      await Promise.all(
        all.map((pooled) =>
          pooled.connection?.then(
            ({ client }) =>
              new Promise<void>((resolve) => {
                client.once('close', () => resolve())
                client.end()
              }),
            () => undefined,
          ),
        ),
      )
    },
  }
}
