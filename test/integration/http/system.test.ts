import { afterEach, describe, expect, it } from 'vitest'
import { createDatabase } from '../../../src/db/knex.js'
import { createLocalBus } from '../../../src/events/local-bus.js'
import { defineRoute } from '../../../src/http/route.js'
import { paginationQuery, pageSchema } from '../../../src/http/pagination.js'
import { z } from '../../../src/http/zod.js'
import { DIALECTS } from '../../helpers/db.js'
import { freePort } from '../../helpers/ports.js'
import { controllableBus, getJson, Resources } from './harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

describe('GET /health', () => {
  it('answers healthy without touching the database', async () => {
    const t = await resources.database('sqlite')
    const db = t.connect()
    await db.destroy()
    const api = await resources.api({ db })
    const res = await getJson(`${api.url}/health`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.body).toEqual({ status: 'healthy' })
  })
})

describe.each(DIALECTS)('GET /readyz on %s', (dialect) => {
  it('is 200 with every component up', async () => {
    const t = await resources.database(dialect)
    const api = await resources.api({ db: t.db })
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ status: 'ready', components: { database: { status: 'up' }, bus: { status: 'up' } } })
  })

  it('reports only the database for a server without an event bus (the auth server)', async () => {
    const t = await resources.database(dialect)
    const api = await resources.api({ db: t.db, bus: undefined })
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ status: 'ready', components: { database: { status: 'up' } } })
  })

  it('is 503 naming the database when its pool is gone', async () => {
    const t = await resources.database(dialect)
    const db = t.connect()
    const api = await resources.api({ db })
    expect((await getJson(`${api.url}/readyz`)).status).toBe(200)
    await db.destroy()
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(503)
    expect(res.body).toMatchObject({
      status: 'not_ready',
      error: 'not ready',
      details: expect.stringMatching(/^database: .+/),
      components: { database: { status: 'down', error: expect.any(String) }, bus: { status: 'up' } },
    })
  })

  it('is 200 degraded naming the bus when the event bus is closed: requests still work, their events wait in the outbox', async () => {
    const t = await resources.database(dialect)
    const bus = createLocalBus()
    const api = await resources.api({ db: t.db, bus })
    await bus.close()
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      status: 'degraded',
      degraded: ['bus'],
      components: { database: { status: 'up' }, bus: { status: 'down', error: 'event bus is closed' } },
    })
  })

  it('is 503 naming the database, and the bus as well, when both are down', async () => {
    const t = await resources.database(dialect)
    const db = t.connect()
    const bus = createLocalBus()
    const api = await resources.api({ db, bus })
    await Promise.all([db.destroy(), bus.close()])
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(503)
    expect(res.body).toMatchObject({ status: 'not_ready', details: expect.stringMatching(/^database: .+; bus: event bus is closed$/) })
  })
})

describe('GET /readyz with unreachable dependencies', () => {
  it('is 503 when Postgres refuses connections', async () => {
    const db = createDatabase(`postgres://postgres@127.0.0.1:${await freePort()}/nodeplane`)
    resources.add(() => db.destroy())
    const api = await resources.api({ db })
    const res = await getJson(`${api.url}/readyz`)
    expect(res.status).toBe(503)
    expect(res.body).toMatchObject({ components: { database: { status: 'down', error: expect.stringContaining('ECONNREFUSED') }, bus: { status: 'up' } } })
  })

  it('answers within the deadline when a dependency hangs, naming it down', async () => {
    const t = await resources.database('sqlite')
    const api = await resources.api({ db: t.db, bus: controllableBus(() => new Promise(() => undefined)), readinessTimeoutMs: 200 })
    const started = Date.now()
    const res = await getJson(`${api.url}/readyz`)
    expect(Date.now() - started).toBeLessThan(2_000)
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ status: 'degraded', components: { database: { status: 'up' }, bus: { status: 'down', error: 'no answer within 200 ms' } } })
  })

  it('reports the error a bus gives', async () => {
    const t = await resources.database('sqlite')
    const api = await resources.api({ db: t.db, bus: controllableBus(async () => ({ ok: false, error: 'nats: connection closed' })) })
    const res = await getJson(`${api.url}/readyz`)
    expect(res).toMatchObject({ status: 200, body: { status: 'degraded', degraded: ['bus'], components: { bus: { status: 'down', error: 'nats: connection closed' } } } })
  })
})

describe('a request while the database is away', () => {
  it('answers 503 {error, details} with Retry-After, not 500, when Postgres refuses connections', async () => {
    const db = createDatabase(`postgres://postgres@127.0.0.1:${await freePort()}/nodeplane`)
    resources.add(() => db.destroy())
    const routes = [
      defineRoute({ method: 'get', path: '/api/v1/widgets', summary: 'List widgets', tags: ['widgets'], auth: 'none', responses: { 200: z.object({ n: z.number() }) } }).handle(async () => {
        await db.raw('select 1')
        return { status: 200, body: { n: 1 } }
      }),
    ]
    const api = await resources.api({ db, routes })
    const res = await getJson(`${api.url}/api/v1/widgets`)
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('2')
    expect(res.body).toEqual({ error: 'service unavailable', details: expect.stringMatching(/^the database cannot be reached; retry in 2 s \(request .+\)$/) })
    // A warning with the driver's reason, not an error with a stack: nothing of ours failed.
    expect(api.logs.lines.filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([])
    expect(api.logs.lines.find((l) => l.msg === 'request failed')).toMatchObject({ level: 'warn', cause: expect.stringContaining('ECONNREFUSED') })
  })
})

describe('GET /metrics', () => {
  it('exposes default and HTTP metrics labelled by route template and daemon', async () => {
    const t = await resources.database('sqlite')
    const api = await resources.api({ db: t.db })
    await fetch(`${api.url}/health`)
    await fetch(`${api.url}/health`)
    await fetch(`${api.url}/no/such/path/123`)
    const res = await fetch(`${api.url}/metrics`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/)
    const text = await res.text()
    const sample = (name: string, labels: Record<string, string>) =>
      text.split('\n').find((line) => line.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
    expect(sample('http_requests_total', { method: 'GET', route: '/health', status: '200', daemon: 'api-server' })).toMatch(/ 2$/)
    expect(sample('http_requests_total', { route: 'unmatched', status: '404' })).toMatch(/ 1$/)
    expect(sample('http_request_duration_seconds_count', { route: '/health', status: '200' })).toMatch(/ 2$/)
    expect(text).not.toContain('/no/such/path/123')
    expect(text).toContain('process_cpu_user_seconds_total{daemon="api-server"}')
  })
})

describe('GET /api/v1/openapi.json', () => {
  it('is an OpenAPI 3.1 document with every route, its parameters, bodies, errors and security', async () => {
    const t = await resources.database('sqlite')
    const routes = [
      defineRoute({
        method: 'get',
        path: '/api/v1/widgets',
        summary: 'List widgets',
        tags: ['widgets'],
        auth: { scope: 'widgets:read' },
        request: { query: paginationQuery },
        responses: { 200: pageSchema(z.object({ id: z.string(), created_at: z.string() })) },
      }).handle(async () => ({ status: 200, body: { items: [], next_cursor: null } })),
      defineRoute({
        method: 'post',
        path: '/api/v1/widgets/{widgetId}/paint',
        summary: 'Paint a widget',
        tags: ['widgets'],
        auth: 'authenticated',
        request: { params: z.object({ widgetId: z.string() }), body: z.object({ color: z.enum(['red', 'blue']) }) },
        responses: { 204: { description: 'Painted' } },
      }).handle(async () => ({ status: 204 })),
    ]
    const api = await resources.api({ db: t.db, routes })
    const res = await getJson(`${api.url}/api/v1/openapi.json`)
    expect(res.status).toBe(200)
    const doc = res.body as {
      openapi: string
      info: { title: string }
      paths: Record<string, Record<string, { parameters?: { name: string; in: string }[]; requestBody?: unknown; responses: Record<string, unknown>; security?: unknown }>>
      components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> }
    }
    expect(doc.openapi).toBe('3.1.0')
    expect(doc.info.title).toEqual(expect.any(String))
    expect(Object.keys(doc.paths).sort()).toEqual(['/api/v1/openapi.json', '/api/v1/widgets', '/api/v1/widgets/{widgetId}/paint', '/health', '/metrics', '/readyz'])

    const list = doc.paths['/api/v1/widgets']?.get
    expect(list?.parameters?.map((p) => `${p.in}:${p.name}`).sort()).toEqual(['query:cursor', 'query:limit'])
    expect(list?.security).toEqual([{ bearerAuth: ['widgets:read'] }])
    expect(Object.keys(list?.responses ?? {}).sort()).toEqual(['200', '400', '401', '403', '429', '500', '503'])
    expect(JSON.stringify(list?.responses['200'])).toContain('next_cursor')

    const paint = doc.paths['/api/v1/widgets/{widgetId}/paint']?.post
    expect(paint?.parameters).toEqual([expect.objectContaining({ in: 'path', name: 'widgetId', required: true })])
    expect(JSON.stringify(paint?.requestBody)).toContain('"enum":["red","blue"]')
    expect(Object.keys(paint?.responses ?? {}).sort()).toEqual(['204', '400', '401', '413', '415', '429', '500', '503'])

    const health = doc.paths['/health']?.get
    expect(health?.security).toBeUndefined()
    expect(health?.responses['500']).toEqual({ description: expect.any(String), content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } })
    expect(doc.paths['/readyz']?.get?.responses).toHaveProperty('503')
    expect(doc.components.schemas.Error).toMatchObject({ type: 'object', required: ['error', 'details'] })
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' })
  })
})
