import { gzipSync } from 'node:zlib'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ConflictError, RateLimitedError, UnauthorizedError } from '../../../src/errors.js'
import type { Authenticator } from '../../../src/http/auth.js'
import { defineRoute, errorResponse, type ApiRoute } from '../../../src/http/route.js'
import { z } from '../../../src/http/zod.js'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { getJson, Resources } from './harness.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const echoBody = z.object({ name: z.string().min(1), count: z.number().int(), tags: z.array(z.string()).optional() })
const thing = z.object({ thing_id: z.string(), verbose: z.boolean() })

function testRoutes(): ApiRoute[] {
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/echo',
      summary: 'Echo',
      auth: 'none',
      request: { body: echoBody },
      responses: { 201: echoBody },
    }).handle(async ({ body }) => ({ status: 201, body })),
    defineRoute({
      method: 'get',
      path: '/api/v1/things/{thingId}',
      summary: 'One thing',
      auth: 'none',
      request: {
        params: z.object({ thingId: z.string().uuid() }),
        query: z.object({ verbose: z.enum(['true', 'false']).default('false') }),
      },
      responses: { 200: thing, 404: errorResponse('No such thing') },
    }).handle(async ({ params, query }) => ({ status: 200, body: { thing_id: params.thingId, verbose: query.verbose === 'true' } })),
    defineRoute({
      method: 'get',
      path: '/api/v1/boom',
      summary: 'Fails unexpectedly',
      auth: 'none',
      responses: { 200: z.object({}) },
    }).handle(async () => {
      throw new Error('connection to 10.0.0.5 lost; password=hunter2')
    }),
    defineRoute({
      method: 'get',
      path: '/api/v1/conflict',
      summary: 'State conflict',
      auth: 'none',
      responses: { 200: z.object({}) },
    }).handle(async () => {
      throw new ConflictError('node changed concurrently', 'expected version 2, found 3; reload and retry')
    }),
    defineRoute({
      method: 'get',
      path: '/api/v1/limited',
      summary: 'Rate limited',
      auth: 'none',
      responses: { 200: z.object({}) },
    }).handle(async () => {
      throw new RateLimitedError('rate limit exceeded', 2.5, 'at most 20 requests per minute')
    }),
    defineRoute({
      method: 'get',
      path: '/api/v1/leaky',
      summary: 'Returns more than it declares',
      auth: 'none',
      responses: { 200: z.object({ name: z.string() }) },
    }).handle(async () => ({ status: 200, body: { name: 'key-1', key_hash: 'c2VjcmV0' } as { name: string } })),
    defineRoute({
      method: 'get',
      path: '/api/v1/admin-only',
      summary: 'Needs admin',
      auth: { scope: 'admin' },
      responses: { 200: z.object({ user_id: z.string() }) },
    }).handle(async ({ principal, log }) => {
      log.info('admin route ran')
      return { status: 200, body: { user_id: principal.userId } }
    }),
    defineRoute({
      method: 'get',
      path: '/api/v1/whoami',
      summary: 'Any authenticated caller',
      auth: 'authenticated',
      responses: { 200: z.object({ user_id: z.string() }) },
    }).handle(async ({ principal }) => ({ status: 200, body: { user_id: principal.userId } })),
  ]
}

const tokens: Record<string, { userId: string; scopes: string[] }> = {
  'admin-token': { userId: 'u-admin', scopes: ['admin'] },
  'user-token': { userId: 'u-user', scopes: ['nodes:read'] },
}

const bearerAuthenticator: Authenticator = async (ctx) => {
  const token = /^Bearer (.+)$/.exec(ctx.get('Authorization'))?.[1]
  const found = token === undefined ? undefined : tokens[token]
  if (!found) throw new UnauthorizedError('unauthorized', 'missing or invalid bearer token')
  return { ...found, method: 'jwt' }
}

const resources = new Resources()
let t: TestDatabase

beforeAll(async () => {
  t = await createTestDatabase('sqlite')
})
afterEach(() => resources.cleanup())
afterAll(() => t.destroy())

function expectErrorBody(body: unknown): asserts body is { error: string; details: string } {
  expect(body).toEqual({ error: expect.any(String), details: expect.any(String) })
}

describe('request id', () => {
  it('generates a UUID when the caller sends none, echoes it and logs it on the access line', async () => {
    const api = await resources.api({ db: t.db })
    const res = await fetch(`${api.url}/health`)
    const id = res.headers.get('x-request-id')
    expect(id).toMatch(UUID)
    const lines = api.logs.forRequest(id as string)
    expect(lines).toContainEqual(expect.objectContaining({ msg: 'request answered', method: 'GET', path: '/health', route: '/health', status: 200 }))
    // Probes are polled constantly: their access lines stay at debug.
    expect(lines.find((l) => l.msg === 'request answered')?.level).toBe('debug')
  })

  it('keeps a sane incoming X-Request-Id, on success and on error, in every line of the request', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), authenticate: bearerAuthenticator })
    const ok = await fetch(`${api.url}/api/v1/admin-only`, { headers: { 'X-Request-Id': 'lb-7f3a:42', Authorization: 'Bearer admin-token' } })
    expect(ok.headers.get('x-request-id')).toBe('lb-7f3a:42')
    const lines = api.logs.forRequest('lb-7f3a:42')
    expect(lines.map((l) => l.msg)).toEqual(['admin route ran', 'request answered'])
    expect(lines[1]?.level).toBe('info')
    expect(lines.every((l) => l.userId === 'u-admin')).toBe(true)

    const failed = await fetch(`${api.url}/nope`, { headers: { 'X-Request-Id': 'req-2' } })
    expect(failed.status).toBe(404)
    expect(failed.headers.get('x-request-id')).toBe('req-2')
  })

  it('puts the caller and the trace on the access line of a request whose handler logs nothing', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), authenticate: bearerAuthenticator })
    const res = await fetch(`${api.url}/api/v1/whoami`, { headers: { 'X-Request-Id': 'quiet-1', Authorization: 'Bearer user-token', 'User-Agent': 'probe/1' } })
    expect(res.status).toBe(200)
    expect(api.logs.forRequest('quiet-1')).toEqual([
      expect.objectContaining({
        msg: 'request answered',
        level: 'info',
        requestId: 'quiet-1',
        traceId: expect.stringMatching(/^[0-9a-f]{32}$/),
        spanId: expect.stringMatching(/^[0-9a-f]{16}$/),
        userId: 'u-user',
        method: 'GET',
        path: '/api/v1/whoami',
        route: '/api/v1/whoami',
        status: 200,
        userAgent: 'probe/1',
      }),
    ])
  })

  it.each([
    ['spaces', 'has spaces in it'],
    ['too long', 'a'.repeat(129)],
    ['quotes', 'x"y'],
    ['leading dash', '-abc'],
  ])('replaces a malformed X-Request-Id (%s) with a generated one', async (_case, sent) => {
    const api = await resources.api({ db: t.db })
    const res = await fetch(`${api.url}/health`, { headers: { 'X-Request-Id': sent } })
    const id = res.headers.get('x-request-id')
    expect(id).toMatch(UUID)
    const [line] = api.logs.forRequest(id as string)
    expect(line).toMatchObject({ requestIdReplaced: true })
    expect(api.logs.text()).not.toContain(sent)
  })

  it('continues an incoming W3C trace: the trace id is on the request log lines', async () => {
    const api = await resources.api({ db: t.db })
    const res = await fetch(`${api.url}/health`, { headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })
    const [line] = api.logs.forRequest(res.headers.get('x-request-id') as string)
    expect(line).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: expect.stringMatching(/^[0-9a-f]{16}$/) })
    expect(line?.spanId).not.toBe('00f067aa0ba902b7')
  })

  it('never logs request bodies, Authorization or X-API-Key', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), authenticate: bearerAuthenticator })
    await fetch(`${api.url}/api/v1/echo`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer admin-token', 'X-API-Key': 'npk_live_abcdef' },
      body: JSON.stringify({ name: 'body-secret-value', count: 1 }),
    })
    await fetch(`${api.url}/api/v1/boom`, { headers: { Authorization: 'Bearer user-token' } })
    const text = api.logs.text()
    expect(text).toContain('request answered')
    for (const secret of ['admin-token', 'user-token', 'npk_live_abcdef', 'body-secret-value']) expect(text).not.toContain(secret)
  })
})

describe('errors', () => {
  it('answers an unknown route with 404 and the error body', async () => {
    const api = await resources.api({ db: t.db, authenticate: bearerAuthenticator })
    const res = await getJson(`${api.url}/api/v1/nothing-here?x=1`, { headers: { Authorization: 'Bearer user-token' } })
    expect(res.status).toBe(404)
    expect(res.body).toEqual({ error: 'not found', details: 'no route for GET /api/v1/nothing-here' })
    const outside = await getJson(`${api.url}/nothing-here`)
    expect(outside.status).toBe(404)
  })

  it('answers an anonymous caller 401 under /api/v1 before revealing whether a path or method exists', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), authenticate: bearerAuthenticator })
    for (const [method, path] of [
      ['GET', '/api/v1/nothing-here'],
      ['DELETE', '/api/v1/admin-only'],
    ] as const) {
      const res = await getJson(`${api.url}${path}`, { method })
      expect(res.status).toBe(401)
      expect(res.headers.get('allow')).toBeNull()
      expectErrorBody(res.body)
    }
    const known = await getJson(`${api.url}/api/v1/admin-only`, { method: 'DELETE', headers: { Authorization: 'Bearer user-token' } })
    expect(known.status).toBe(405)
  })

  it('answers a wrong method on a known path with 405 and Allow', async () => {
    const api = await resources.api({ db: t.db })
    const res = await getJson(`${api.url}/health`, { method: 'DELETE' })
    expect(res.status).toBe(405)
    expect(res.headers.get('allow')?.split(', ').sort()).toEqual(['GET', 'HEAD'])
    expectErrorBody(res.body)
    expect(res.body.error).toBe('method not allowed')
  })

  it('answers a body over the limit with 413, whether declared or streamed', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), bodyLimitBytes: 2048 })
    const big = JSON.stringify({ name: 'x'.repeat(3000), count: 1 })
    const declared = await getJson(`${api.url}/api/v1/echo`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: big })
    expect(declared.status).toBe(413)
    expect(declared.body).toEqual({ error: 'request body too large', details: 'the request body exceeds the limit of 2048 bytes' })

    const chunks = [big.slice(0, 1500), big.slice(1500)]
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift()
        if (next === undefined) controller.close()
        else controller.enqueue(new TextEncoder().encode(next))
      },
    })
    const streamed = await getJson(`${api.url}/api/v1/echo`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit)
    expect(streamed.status).toBe(413)
    expectErrorBody(streamed.body)

    const fits = await getJson(`${api.url}/api/v1/echo`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'x'.repeat(1900), count: 1 }),
    })
    expect(fits.status).toBe(201)
  })

  it('answers a non-JSON body with 415', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const res = await getJson(`${api.url}/api/v1/echo`, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: 'name=x' })
    expect(res.status).toBe(415)
    expect(res.body).toEqual({ error: 'unsupported media type', details: 'the request body must be application/json, not text/plain' })
  })

  it('reads gzip bodies, refuses unknown encodings with 415 and corrupt ones with 400', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const post = (body: Uint8Array, encoding: string) =>
      getJson(`${api.url}/api/v1/echo`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Encoding': encoding }, body })
    const zipped = await post(gzipSync(JSON.stringify({ name: 'zipped', count: 2 })), 'gzip')
    expect(zipped).toMatchObject({ status: 201, body: { name: 'zipped', count: 2 } })
    const zstd = await post(Buffer.from('{}'), 'zstd')
    expect(zstd).toMatchObject({ status: 415, body: { error: 'unsupported content encoding' } })
    const corrupt = await post(Buffer.from('not gzip at all'), 'gzip')
    expect(corrupt).toMatchObject({ status: 400, body: { error: 'invalid request body' } })
  })

  it('answers malformed JSON with 400 without quoting it', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const res = await getJson(`${api.url}/api/v1/echo`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"name": "zzq-marker", ' })
    expect(res.status).toBe(400)
    expectErrorBody(res.body)
    expect(res.body.error).toBe('malformed JSON')
    expect(JSON.stringify(res.body)).not.toContain('zzq-marker')
  })

  it('names every invalid field of the body, the query and the path', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const bad = await getJson(`${api.url}/api/v1/echo`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: '', count: 'seven', tags: ['a', 3] }),
    })
    expect(bad.status).toBe(400)
    expectErrorBody(bad.body)
    expect(bad.body.error).toBe('invalid request')
    expect(bad.body.details).toContain('body.name:')
    expect(bad.body.details).toContain('body.count: Expected number, received string')
    expect(bad.body.details).toContain('body.tags[1]:')

    const missing = await getJson(`${api.url}/api/v1/echo`, { method: 'POST' })
    expect(missing.status).toBe(400)
    expect(missing.body).toEqual({ error: 'invalid request', details: 'body: Required' })

    const params = await getJson(`${api.url}/api/v1/things/not-a-uuid?verbose=maybe`)
    expect(params.status).toBe(400)
    expectErrorBody(params.body)
    expect(params.body.details).toMatch(/params\.thingId: Invalid uuid; query\.verbose: Invalid enum value/)

    const good = await getJson(`${api.url}/api/v1/things/6f1c1a5e-2f0b-4f4e-9a59-8f0e1c0b9d11?verbose=true`)
    expect(good).toMatchObject({ status: 200, body: { thing_id: '6f1c1a5e-2f0b-4f4e-9a59-8f0e1c0b9d11', verbose: true } })
  })

  it('maps domain errors to their status, and RateLimitedError sets Retry-After', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const conflict = await getJson(`${api.url}/api/v1/conflict`)
    expect(conflict).toMatchObject({ status: 409, body: { error: 'node changed concurrently', details: 'expected version 2, found 3; reload and retry' } })
    const limited = await getJson(`${api.url}/api/v1/limited`)
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toBe('3')
    expect(limited.body).toEqual({ error: 'rate limit exceeded', details: 'at most 20 requests per minute' })
  })

  it('answers an unexpected error with 500, no stack or message in the body, and logs it with the request id', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const res = await getJson(`${api.url}/api/v1/boom`, { headers: { 'X-Request-Id': 'boom-1' } })
    expect(res.status).toBe(500)
    expect(res.body).toEqual({ error: 'internal error', details: 'request boom-1 failed; see server logs' })
    const logged = api.logs.forRequest('boom-1').find((l) => l.msg === 'request failed')
    expect(logged).toMatchObject({ level: 'error', err: { message: expect.stringContaining('connection to 10.0.0.5 lost') } })
    expect((logged?.err as { stack?: string }).stack).toContain('conventions.test.ts')
    const access = api.logs.forRequest('boom-1').find((l) => l.msg === 'request answered')
    expect(access).toMatchObject({ status: 500, route: '/api/v1/boom' })
  })

  it('sends only the fields a response schema declares', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    const res = await getJson(`${api.url}/api/v1/leaky`)
    expect(res).toMatchObject({ status: 200, body: { name: 'key-1' } })
    expect(res.body).not.toHaveProperty('key_hash')
  })
})

describe('authentication slot', () => {
  it('refuses a route that needs authentication with 401 when no authenticator is configured', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes() })
    for (const path of ['/api/v1/admin-only', '/api/v1/whoami']) {
      const res = await getJson(`${api.url}${path}`, { headers: { Authorization: 'Bearer admin-token' } })
      expect(res.status).toBe(401)
      expect(res.body).toEqual({ error: 'unauthorized', details: 'this route requires authentication, and none is configured on this server' })
    }
  })

  it('authenticates, then checks the scope: 401 without a credential, 403 without the scope', async () => {
    const api = await resources.api({ db: t.db, routes: testRoutes(), authenticate: bearerAuthenticator })
    expect((await getJson(`${api.url}/api/v1/admin-only`)).status).toBe(401)
    const forbidden = await getJson(`${api.url}/api/v1/admin-only`, { headers: { Authorization: 'Bearer user-token' } })
    expect(forbidden).toMatchObject({ status: 403, body: { error: 'forbidden', details: 'this route requires the scope "admin"' } })
    const ok = await getJson(`${api.url}/api/v1/admin-only`, { headers: { Authorization: 'Bearer admin-token' } })
    expect(ok).toMatchObject({ status: 200, body: { user_id: 'u-admin' } })
    const whoami = await getJson(`${api.url}/api/v1/whoami`, { headers: { Authorization: 'Bearer user-token' } })
    expect(whoami).toMatchObject({ status: 200, body: { user_id: 'u-user' } })
    // health and friends stay open
    expect((await fetch(`${api.url}/health`)).status).toBe(200)
  })

  it('runs the rate limiter after authentication and before the handler', async () => {
    let calls = 0
    const api = await resources.api({
      db: t.db,
      routes: testRoutes(),
      authenticate: bearerAuthenticator,
      rateLimit: async (principal) => {
        calls++
        if (principal.userId === 'u-user') throw new RateLimitedError('rate limit exceeded', 60)
      },
    })
    expect((await getJson(`${api.url}/api/v1/whoami`)).status).toBe(401)
    expect(calls).toBe(0)
    const limited = await getJson(`${api.url}/api/v1/whoami`, { headers: { Authorization: 'Bearer user-token' } })
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toBe('60')
    expect((await getJson(`${api.url}/api/v1/whoami`, { headers: { Authorization: 'Bearer admin-token' } })).status).toBe(200)
  })
})
