import { describe, expect, it } from 'vitest'
import { PayloadTooLargeError } from '../../../src/errors.js'
import { bodyReadError } from '../../../src/http/body.js'
import { toErrorAnswer } from '../../../src/http/error-mapping.js'
import { acceptRequestId } from '../../../src/http/request-id.js'
import { defineRoute } from '../../../src/http/route.js'
import { fieldPath } from '../../../src/http/validation.js'
import { z } from '../../../src/http/zod.js'

describe('defineRoute', () => {
  it('refuses a path whose parameters differ from request.params', () => {
    expect(() =>
      defineRoute({ method: 'get', path: '/api/v1/nodes/{nodeId}', summary: 'x', auth: 'none', responses: { 200: z.object({}) } }),
    ).toThrow(/path parameters \[nodeId\] do not match request.params \[\]/)
    expect(() =>
      defineRoute({
        method: 'get',
        path: '/api/v1/nodes/{nodeId}',
        summary: 'x',
        auth: 'none',
        request: { params: z.object({ id: z.string() }) },
        responses: { 200: z.object({}) },
      }),
    ).toThrow(/do not match/)
  })

  it('refuses a body-less response other than 204', () => {
    expect(() =>
      defineRoute({ method: 'post', path: '/api/v1/x', summary: 'x', auth: 'none', responses: { 202: { description: 'Accepted' } } }),
    ).toThrow(/response 202 needs a schema/)
  })

  it('mounts OpenAPI-style paths in router form', () => {
    const route = defineRoute({
      method: 'post',
      path: '/api/v1/rollouts/{id}/nodes/{nodeId}/retry',
      summary: 'x',
      auth: { scope: 'admin' },
      request: { params: z.object({ id: z.string(), nodeId: z.string() }) },
      responses: { 204: { description: 'Retrying' } },
    }).handle(async () => ({ status: 204 }))
    expect(route.routerPath).toBe('/api/v1/rollouts/:id/nodes/:nodeId/retry')
    expect(route.openapi.security).toEqual([{ bearerAuth: ['admin'] }])
  })
})

describe('request id', () => {
  it.each(['6f1c1a5e-2f0b-4f4e-9a59-8f0e1c0b9d11', '01HZX3J4K5M6N7P8Q9R0S1T2V3', 'Root=1-5759e988-bd862e3fe1be46a994272793', 'a'.repeat(128)])('accepts %s', (id) => {
    expect(acceptRequestId(id)).toBe(id)
  })
  it.each(['', ' ', 'a b', 'a'.repeat(129), 'id\u00e9', '<script>', '-x', 'a,b'])('refuses %j', (id) => {
    expect(acceptRequestId(id)).toBeUndefined()
  })
  it('refuses a repeated header', () => {
    expect(acceptRequestId(['a', 'b'])).toBeUndefined()
  })
})

describe('field paths', () => {
  it('names nested fields the way a client writes them', () => {
    expect(fieldPath('body', ['items', 0, 'name'])).toBe('body.items[0].name')
    expect(fieldPath('query', ['limit'])).toBe('query.limit')
    expect(fieldPath('body', [])).toBe('body')
  })
})

describe('error answers', () => {
  it('turns body parser errors into fixed texts that never quote the body', () => {
    const parseError = Object.assign(new SyntaxError('Unexpected token s in JSON: {"secret": s'), { status: 400, body: '{"secret": s' })
    const malformed = toErrorAnswer(bodyReadError(parseError, 1024), 'r1')
    expect(malformed).toMatchObject({ status: 400, body: { error: 'malformed JSON' }, unexpected: false })
    expect(JSON.stringify(malformed.body)).not.toContain('secret')

    const tooLarge = Object.assign(new Error('request entity too large'), { status: 413, type: 'entity.too.large', limit: 1024, expose: true })
    expect(toErrorAnswer(bodyReadError(tooLarge, 1024), 'r1')).toMatchObject({ status: 413, headers: { Connection: 'close' } })
    expect(toErrorAnswer(new PayloadTooLargeError('too large'), 'r1').headers).toEqual({ Connection: 'close' })

    const encoding = Object.assign(new Error('Unsupported Content-Encoding: zstd'), { status: 415 })
    expect(toErrorAnswer(bodyReadError(encoding, 1024), 'r1')).toMatchObject({ status: 415, body: { error: 'unsupported content encoding' } })
    const zlib = Object.assign(new Error('incorrect header check'), { code: 'Z_DATA_ERROR', errno: -3 })
    expect(toErrorAnswer(bodyReadError(zlib, 1024), 'r1')).toMatchObject({ status: 400, body: { error: 'invalid request body' } })

    const unrelated = new Error('disk full')
    expect(bodyReadError(unrelated, 1024)).toBe(unrelated)
  })

  it('passes on the status and message of an exposed http-errors 4xx (ctx.throw)', () => {
    const thrown = Object.assign(new Error('Bad Request'), { status: 400, expose: true })
    expect(toErrorAnswer(thrown, 'r1')).toMatchObject({ status: 400, body: { error: 'Bad Request', details: 'Bad Request' } })
  })

  it('treats anything unknown, a stray ZodError included, as a 500 naming only the request id', () => {
    const zodError = z.object({ a: z.string() }).safeParse({}).error
    for (const err of [new Error('boom'), zodError, 'a string', { status: 503 }, Object.assign(new Error('x'), { status: 502 })]) {
      expect(toErrorAnswer(err, 'req-9')).toEqual({
        status: 500,
        body: { error: 'internal error', details: 'request req-9 failed; see server logs' },
        headers: {},
        unexpected: true,
      })
    }
  })
})
