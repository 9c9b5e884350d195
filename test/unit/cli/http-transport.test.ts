/** The CLI's default transport (node:http) against a real local server. */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../../../src/cli/api-client.js'
import { describeFailure } from '../../../src/cli/errors.js'
import { freePort } from '../../helpers/ports.js'

const KEY = `np_${'k'.repeat(43)}`
const seen: Array<{ url: string; authorization: string | undefined; body: string }> = []
let server: http.Server
let base: string

beforeAll(async () => {
  server = http.createServer((req, res) => {
    let body = ''
    req.on('data', (chunk: Buffer) => (body += chunk.toString()))
    req.on('end', () => {
      seen.push({ url: req.url ?? '', authorization: req.headers.authorization, body })
      if (req.url?.startsWith('/api/v1/moved')) {
        res.writeHead(302, { location: `${base}/api/v1/elsewhere` }).end()
      } else if (req.url?.startsWith('/api/v1/slow')) {
        setTimeout(() => res.writeHead(200).end('{}'), 2_000).unref()
      } else if (req.url?.startsWith('/api/v1/limited')) {
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '7' }).end(JSON.stringify({ error: 'rate_limited', details: 'too many requests' }))
      } else {
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ echoed: body ? JSON.parse(body) : null }))
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())))

function client(url = base, timeoutMs?: number): ApiClient {
  return new ApiClient({ url, urlSource: 'env', credential: { key: KEY, source: 'env' } }, timeoutMs === undefined ? {} : { timeoutMs })
}

describe('CLI HTTP transport', () => {
  it('posts JSON with the bearer key and returns the status and parsed body', async () => {
    expect(await client().postWithStatus('/things', { name: 'a' })).toEqual({ status: 201, body: { echoed: { name: 'a' } } })
    expect(seen.at(-1)).toMatchObject({ url: '/api/v1/things', authorization: `Bearer ${KEY}` })
  })

  it('never follows a redirect, so the key does not travel to the new address', async () => {
    const before = seen.length
    const failure = describeFailure(await client().get('/moved').catch((e: unknown) => e))
    expect(failure.message).toContain('redirects (302')
    expect(failure.message).toContain('/api/v1/elsewhere')
    expect(seen.slice(before).map((s) => s.url)).toEqual(['/api/v1/moved'])
  })

  it('reads Retry-After from a 429', async () => {
    const failure = describeFailure(await client().get('/limited').catch((e: unknown) => e))
    expect(failure.exitCode).toBe(1)
    expect(failure.details).toBe('retry in 7 s')
  })

  it('names the refused connection, and gives up after the timeout', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`
    const refused = describeFailure(await client(closed).get('/me').catch((e: unknown) => e))
    expect(refused.exitCode).toBe(69)
    expect(refused.message).toBe(`cannot reach the API at ${closed}: ECONNREFUSED`)
    const slow = describeFailure(await client(base, 600).get('/slow').catch((e: unknown) => e))
    expect(slow.exitCode).toBe(69)
    expect(slow.message).toBe(`no answer from the API at ${base} within 1 s`)
  })
})
