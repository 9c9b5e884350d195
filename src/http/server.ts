/**
 * Listening and graceful stopping, for any Koa app (api-server, auth-server, webhooks).
 *
 * `close()`: stop accepting connections, let requests in flight finish (their responses say
 * `Connection: close`; idle keep-alive sockets are closed at once), and after `drainTimeoutMs`
 * destroy whatever is still open, so a hung request cannot hold a shutdown hostage.
 */
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

export interface HttpServerOptions {
  host: string
  /** 0 picks a free port (tests). */
  port: number
  /** How long `close()` waits for requests in flight before cutting them off. */
  drainTimeoutMs?: number
  /** Time allowed to receive a request's headers (slowloris guard). */
  headersTimeoutMs?: number
  /** Time allowed to receive a whole request, body included. */
  requestTimeoutMs?: number
  /** Idle time before a keep-alive connection is closed. */
  keepAliveTimeoutMs?: number
  /** HTTP Upgrade requests (WebSocket); without it they are refused by Node (the socket is closed). */
  onUpgrade?: (req: http.IncomingMessage, socket: import('node:stream').Duplex, head: Buffer) => void
}

export interface RunningHttpServer {
  url: string
  port: number
  /** Idempotent: every call returns the same stop. */
  close(): Promise<void>
}

export const DEFAULT_DRAIN_TIMEOUT_MS = 10_000
export const DEFAULT_HEADERS_TIMEOUT_MS = 15_000
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 10_000
const IDLE_SWEEP_MS = 50

/** Any Koa app, whatever its state and context types. */
export interface HttpApp {
  callback(): (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void> | void
}

export async function startHttpServer(app: HttpApp, options: HttpServerOptions): Promise<RunningHttpServer> {
  const handle = app.callback()
  let closing: Promise<void> | undefined

  // Responses not yet sent: on a stop they say `Connection: close`, so keep-alive clients
  // reconnect (to another instance) instead of reusing a socket that is about to go.
  const unsent = new Set<http.ServerResponse>()
  const server = http.createServer((req, res) => {
    if (closing) res.setHeader('Connection', 'close')
    unsent.add(res)
    res.once('close', () => unsent.delete(res))
    void handle(req, res)
  })
  server.headersTimeout = options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS
  server.requestTimeout = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
  // keepAliveTimeout must stay below headersTimeout, or Node may cut a request that reused a socket.
  server.keepAliveTimeout = Math.min(options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_TIMEOUT_MS, server.headersTimeout - 1)

  if (options.onUpgrade) server.on('upgrade', options.onUpgrade)
  const sockets = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err)
    server.once('error', onError)
    server.listen(options.port, options.host, () => {
      server.off('error', onError)
      resolve()
    })
  })
  const port = (server.address() as AddressInfo).port
  const host = options.host.includes(':') ? `[${options.host}]` : options.host

  const stop = async (): Promise<void> => {
    for (const res of unsent) if (!res.headersSent) res.setHeader('Connection', 'close')
    const drained = new Promise<void>((resolve) => server.close(() => resolve()))
    server.closeIdleConnections()
    // A socket whose response just finished becomes idle; close those as they appear.
    const sweep = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS)
    const deadline = setTimeout(() => {
      server.closeAllConnections()
      for (const socket of sockets) socket.destroy()
    }, options.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS)
    try {
      await drained
    } finally {
      clearInterval(sweep)
      clearTimeout(deadline)
    }
  }

  return {
    url: `http://${host}:${port}`,
    port,
    close() {
      closing ??= stop()
      return closing
    },
  }
}
