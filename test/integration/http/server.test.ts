import http from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { defineRoute } from '../../../src/http/route.js'
import { startHttpServer } from '../../../src/http/server.js'
import { createApiApp } from '../../../src/http/app.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { createLogger } from '../../../src/log.js'
import { createMetrics } from '../../../src/metrics.js'
import { z } from '../../../src/http/zod.js'
import { waitFor } from '../../helpers/ports.js'
import { LogCapture, Resources } from './harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

/** A plain request on its own connection, so the test sees exactly what the socket sees. */
function request(url: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: new http.Agent({ keepAlive: true }) }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

async function slowApi(drainTimeoutMs: number) {
  const t = await resources.database('sqlite')
  const release = deferred()
  let entered = 0
  const slow = defineRoute({
    method: 'get',
    path: '/slow',
    summary: 'Waits until released',
    auth: 'none',
    responses: { 200: z.object({ done: z.boolean() }) },
  }).handle(async () => {
    entered++
    await release.promise
    return { status: 200, body: { done: true } }
  })
  const bus = createLocalBus()
  resources.add(() => bus.close())
  const app = createApiApp({ db: t.db, bus, logger: createLogger({ destination: new LogCapture() }), metrics: createMetrics('api-server'), routes: [slow] })
  const server = await startHttpServer(app, { host: '127.0.0.1', port: 0, drainTimeoutMs })
  resources.add(() => server.close())
  return { server, release, entered: () => entered }
}

describe('startHttpServer', () => {
  it('listens on the port it was given, or a free one for 0', async () => {
    const { server } = await slowApi(1_000)
    expect(server.port).toBeGreaterThan(0)
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`)
    const res = await request(`${server.url}/health`)
    expect(res.status).toBe(200)
  })

  it('on close, refuses new connections, lets the request in flight finish, then resolves', async () => {
    const { server, release, entered } = await slowApi(10_000)
    const inFlight = request(`${server.url}/slow`)
    await waitFor(async () => entered() === 1, 'the slow request to arrive')

    let closed = false
    const closing = server.close().then(() => (closed = true))
    await expect(request(`${server.url}/health`)).rejects.toThrow(/ECONNREFUSED/)
    expect(closed).toBe(false)

    release.resolve()
    const res = await inFlight
    expect(res).toMatchObject({ status: 200, body: '{"done":true}' })
    expect(res.headers.connection).toBe('close')
    await closing
    expect(closed).toBe(true)
    // idempotent
    await server.close()
  })

  it('cuts off requests still running at the drain deadline', async () => {
    const { server, entered } = await slowApi(300)
    const inFlight = request(`${server.url}/slow`)
    await waitFor(async () => entered() === 1, 'the slow request to arrive')
    const started = Date.now()
    await server.close()
    expect(Date.now() - started).toBeLessThan(3_000)
    await expect(inFlight).rejects.toThrow(/socket hang up|ECONNRESET/)
  })

  it('closes idle keep-alive connections at once', async () => {
    const { server } = await slowApi(10_000)
    // A keep-alive connection left open by a finished request must not delay the stop.
    expect((await request(`${server.url}/health`)).status).toBe(200)
    const started = Date.now()
    await server.close()
    expect(Date.now() - started).toBeLessThan(2_000)
  })

  it('reports a port in use as an error with its code', async () => {
    const { server } = await slowApi(1_000)
    const app = createApiApp({
      db: (await resources.database('sqlite')).db,
      bus: resources.localBus(),
      logger: createLogger({ destination: new LogCapture() }),
      metrics: createMetrics('api-server'),
    })
    await expect(startHttpServer(app, { host: '127.0.0.1', port: server.port })).rejects.toMatchObject({ code: 'EADDRINUSE' })
  })
})
