import { describe, expect, it } from 'vitest'
import { ApiClient, errorFromResponse, retryAfterSeconds } from '../../../src/cli/api-client.js'
import { describeFailure } from '../../../src/cli/errors.js'
import type { ApiTarget } from '../../../src/cli/api-target.js'

const KEY = `np_${'k'.repeat(43)}`
const target: ApiTarget = { url: 'http://127.0.0.1:18080', urlSource: 'env', credential: { key: KEY, source: 'env' } }

interface Seen {
  url: string
  init: RequestInit
}

function fakeFetch(status: number, body: unknown, headers: Record<string, string> = {}) {
  const seen: Seen[] = []
  const impl = (async (url: string | URL | Request, init?: RequestInit) => {
    seen.push({ url: String(url), init: init ?? {} })
    const text = body === undefined ? null : typeof body === 'string' ? body : JSON.stringify(body)
    return new Response(text, { status, headers: { 'content-type': 'application/json', ...headers } })
  }) as typeof fetch
  return { impl, seen }
}

async function failure(status: number, body: unknown, headers: Record<string, string> = {}) {
  const { impl } = fakeFetch(status, body, headers)
  const err = await new ApiClient(target, { fetch: impl }).get('/me').catch((e: unknown) => e)
  return describeFailure(err)
}

describe('API client', () => {
  it('sends the key as a bearer token with a request id and parses JSON', async () => {
    const { impl, seen } = fakeFetch(200, { user_id: 'u1' })
    const api = new ApiClient(target, { fetch: impl })
    expect(await api.get('/api-keys', { limit: 5, cursor: undefined })).toEqual({ user_id: 'u1' })
    expect(seen[0]?.url).toBe('http://127.0.0.1:18080/api/v1/api-keys?limit=5')
    const headers = seen[0]?.init.headers as Record<string, string>
    expect(headers.Authorization).toBe(`Bearer ${KEY}`)
    expect(headers['X-Request-Id']).toMatch(/^[0-9a-f-]{36}$/)
  })

  it('returns nothing for 204', async () => {
    const { impl } = fakeFetch(204, undefined)
    expect(await new ApiClient(target, { fetch: impl }).delete('/api-keys/x')).toBeUndefined()
  })

  it.each([
    [400, 2, 'ValidationError'],
    [401, 77, 'UnauthorizedError'],
    [403, 77, 'ForbiddenError'],
    [404, 3, 'NotFoundError'],
    [409, 4, 'ConflictError'],
    [429, 1, 'RateLimitedError'],
    [500, 69, 'UnavailableError'],
    [503, 69, 'UnavailableError'],
  ])('maps HTTP %i to exit %i (%s) and shows the server reason', async (status, exitCode, name) => {
    const result = await failure(status, { error: 'some error', details: 'what the server said' }, { 'retry-after': '7' })
    expect(result).toMatchObject({ exitCode, name })
    expect(result.message).toContain('what the server said')
    expect(`${result.message} ${result.details}`).not.toContain(KEY)
  })

  it('says what to do: log in on 401, which scope on 403, when to retry on 429, the request id on 5xx', async () => {
    expect((await failure(401, { error: 'unauthorized', details: 'API key revoked' })).details).toContain('NODEPLANE_API_KEY was refused')
    const forbidden = await failure(403, { error: 'forbidden', details: 'this route requires the scope "api-keys:manage"' })
    expect(forbidden.message).toBe('missing scope: this route requires the scope "api-keys:manage"')
    expect((await failure(429, { error: 'rate limited' }, { 'retry-after': '12' })).details).toBe('retry in 12 s')
    const failed = errorFromResponse({ status: 502, body: '<html>bad gateway</html>', url: target.url, requestId: 'req-1' })
    expect(describeFailure(failed)).toMatchObject({ exitCode: 69, message: `the API at ${target.url} failed with 502: HTTP 502`, details: expect.stringContaining('req-1') })
  })

  it('names the URL when the API cannot be reached (exit 69)', async () => {
    const refused = (async () => {
      throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } })
    }) as typeof fetch
    const err = await new ApiClient({ ...target, urlSource: 'stack' }, { fetch: refused }).get('/me').catch((e: unknown) => e)
    expect(describeFailure(err)).toMatchObject({
      exitCode: 69,
      message: `cannot reach the API at ${target.url}: ECONNREFUSED`,
      details: expect.stringContaining('nodeplane up'),
    })
  })

  it('refuses to follow a redirect', async () => {
    const result = await failure(302, '', { location: 'https://elsewhere.example.com/' })
    expect(result).toMatchObject({ exitCode: 1, message: expect.stringContaining('redirects (302 to https://elsewhere.example.com/)') })
  })

  it('reads Retry-After as seconds or a date', () => {
    expect(retryAfterSeconds('30')).toBe(30)
    expect(retryAfterSeconds(new Date(10_000).toUTCString(), 0)).toBe(10)
    expect(retryAfterSeconds('soon')).toBeUndefined()
  })
})
