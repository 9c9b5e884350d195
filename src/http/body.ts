/**
 * Request bodies: JSON only, at most `limitBytes` (HTTP_BODY_LIMIT_BYTES, 1 MiB by default).
 *
 * - `declaredBodyLimit` runs for every request, before routing: a Content-Length over the limit
 *   is refused with 413 without reading a byte of it, whatever the path.
 * - `jsonBody` runs only on routes that declare a body, after authentication (an anonymous
 *   caller's body is never parsed): a body that is not `application/json` is 415; a chunked body
 *   that grows past the limit is 413 as soon as it does; malformed JSON is 400.
 */
import { koaBody } from 'koa-body'
import { PayloadTooLargeError } from '../errors.js'
import type { ApiMiddleware } from './context.js'
import { UnsupportedMediaTypeError } from './http-errors.js'

export const DEFAULT_BODY_LIMIT_BYTES = 1024 * 1024

export function declaredBodyLimit(limitBytes: number): ApiMiddleware {
  return async (ctx, next) => {
    const declared = ctx.req.headers['content-length']
    if (declared !== undefined && Number(declared) > limitBytes) {
      throw tooLarge(limitBytes)
    }
    await next()
  }
}

export function jsonBody(limitBytes: number): ApiMiddleware {
  const parse = koaBody({
    json: true,
    jsonStrict: true,
    jsonLimit: limitBytes,
    urlencoded: false,
    text: false,
    multipart: false,
    patchNode: false,
    patchKoa: true,
  }) as unknown as ApiMiddleware
  return async (ctx, next) => {
    // No body at all (ctx.is() is null, or an explicit Content-Length: 0): nothing to parse, and
    // the route's schema reports the body as missing.
    const isJson = ctx.req.headers['content-length'] === '0' ? null : ctx.is('application/json')
    if (isJson === null) return next()
    if (isJson === false) {
      const sent = ctx.get('Content-Type') || 'no Content-Type'
      throw new UnsupportedMediaTypeError('unsupported media type', `the request body must be application/json, not ${sent.slice(0, 100)}`)
    }
    await parse(ctx, next)
  }
}

export function tooLarge(limitBytes: number): PayloadTooLargeError {
  return new PayloadTooLargeError('request body too large', `the request body exceeds the limit of ${limitBytes} bytes`)
}
