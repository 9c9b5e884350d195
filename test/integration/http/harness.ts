/**
 * Starts the api-server app on a loopback port with its log lines captured, and guarantees
 * that every server, pool and bus a test opened is closed again (`cleanup()` in afterEach).
 */
import http from 'node:http'
import { Writable } from 'node:stream'
import type { Db } from '../../../src/db/knex.js'
import type { BusComponentHealth, EventBus } from '../../../src/events/bus.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { createApiApp, type ApiAppOptions } from '../../../src/http/app.js'
import { startHttpServer, type RunningHttpServer } from '../../../src/http/server.js'
import { createLogger } from '../../../src/log.js'
import { createMetrics, type Metrics } from '../../../src/metrics.js'
import { createTestDatabase, type Dialect, type TestDatabase } from '../../helpers/db.js'

export type LogLine = Record<string, unknown> & { msg?: string; level?: string }

export class LogCapture extends Writable {
  readonly raw: string[] = []
  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    this.raw.push(...chunk.toString('utf8').split('\n').filter((l) => l.length > 0))
    done()
  }
  get lines(): LogLine[] {
    return this.raw.map((l) => JSON.parse(l) as LogLine)
  }
  text(): string {
    return this.raw.join('\n')
  }
  forRequest(requestId: string): LogLine[] {
    return this.lines.filter((l) => l.requestId === requestId)
  }
}

export interface StartedApi {
  url: string
  server: RunningHttpServer
  logs: LogCapture
  metrics: Metrics
}

type Closer = () => Promise<unknown>

export class Resources {
  private readonly closers: Closer[] = []

  add(close: Closer): void {
    this.closers.push(close)
  }

  async database(dialect: Dialect): Promise<TestDatabase> {
    const t = await createTestDatabase(dialect)
    this.add(() => t.destroy())
    return t
  }

  localBus(): EventBus {
    const bus = createLocalBus()
    this.add(() => bus.close())
    return bus
  }

  async api(options: Partial<ApiAppOptions> & { db: Db }): Promise<StartedApi> {
    const logs = new LogCapture()
    const metrics = options.metrics ?? createMetrics('api-server')
    const app = createApiApp({
      bus: options.bus ?? this.localBus(),
      logger: createLogger({ destination: logs, level: 'debug' }),
      metrics,
      ...options,
    })
    const server = await startHttpServer(app, { host: '127.0.0.1', port: 0, drainTimeoutMs: 2_000 })
    this.add(() => server.close())
    return { url: server.url, server, logs, metrics }
  }

  /** Closes everything, newest first (servers before the pools they use). */
  async cleanup(): Promise<void> {
    const failures: unknown[] = []
    while (this.closers.length > 0) {
      const close = this.closers.pop() as Closer
      await close().catch((err: unknown) => failures.push(err))
    }
    if (failures.length > 0) throw new AggregateError(failures, 'cleanup failed')
  }
}

/** An EventBus stand-in whose health a test controls (for states a real bus cannot fake). */
export function controllableBus(health: () => Promise<BusComponentHealth>): EventBus {
  return {
    kind: 'local',
    publish: async () => undefined,
    subscribe: async () => ({ close: async () => undefined }),
    health,
    onReconnect: () => () => undefined,
    close: async () => undefined,
  }
}

export async function getJson(url: string, init?: RequestInit): Promise<{ status: number; headers: Headers; body: unknown }> {
  const res = await fetch(url, init)
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // not JSON; the test decides whether that is wrong
  }
  return { status: res.status, headers: res.headers, body }
}

export interface RawAnswer {
  status: number
  text: string
  body: unknown
}

/**
 * A raw HTTP request: the path is sent as given (no URL normalisation of `..` or `%2e`);
 * `chunked` sends the body without Content-Length.
 */
export function rawRequest(url: string, method: string, path: string, headers: Record<string, string>, body?: Buffer, chunked = false): Promise<RawAnswer> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, method, path, headers: { ...headers, ...(body && !chunked ? { 'content-length': String(body.length) } : {}) } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        let parsed: unknown = text
        try {
          parsed = JSON.parse(text)
        } catch {
          // not JSON; the caller decides
        }
        resolve({ status: res.statusCode ?? 0, text, body: parsed })
      })
      res.on('error', reject)
    })
    // The server may close early (413 with Connection: close) while a chunked body is still going.
    req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'EPIPE' || err.code === 'ECONNRESET' ? undefined : reject(err)))
    if (body && chunked) {
      for (let i = 0; i < body.length; i += 64 * 1024) req.write(body.subarray(i, i + 64 * 1024))
      req.end()
    } else req.end(body)
  })
}
