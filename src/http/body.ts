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
import { PayloadTooLargeError, ValidationError } from '../errors.js'
import type { ApiContext, ApiMiddleware } from './context.js'
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
    try {
      await parse(ctx, async () => undefined)
    } catch (err) {
      throw bodyReadError(err, limitBytes)
    }
    await next()
  }
}

/**
 * What reading or parsing a body can fail with (co-body, raw-body, inflation, zlib), as one of
 * our errors with a fixed text: the original messages can quote the body. Anything else is
 * returned as it is (a 500).
 */
export function bodyReadError(err: unknown, limitBytes: number): unknown {
  if (!(err instanceof Error)) return err
  const { status, type, code } = err as Error & { status?: unknown; type?: unknown; code?: unknown }
  if (type === 'entity.too.large') return tooLarge(limitBytes)
  if (type === 'charset.unsupported') return new UnsupportedMediaTypeError('unsupported charset', 'send the JSON body as UTF-8')
  if (type === 'encoding.unsupported' || status === 415) {
    return new UnsupportedMediaTypeError('unsupported content encoding', 'send the body uncompressed, or gzip, deflate or br encoded')
  }
  if (type === 'request.aborted') return new ValidationError('request aborted', 'the client closed the connection before the body was complete')
  if (type === 'request.size.invalid') return new ValidationError('invalid request body', 'the body length does not match Content-Length')
  // co-body marks a JSON.parse failure (and a __proto__ key) with status 400.
  if (err instanceof SyntaxError) {
    return new ValidationError('malformed JSON', 'the request body is not valid JSON (an object or an array is expected)')
  }
  if (typeof code === 'string' && code.startsWith('Z_')) {
    return new ValidationError('invalid request body', 'the body could not be decompressed as its Content-Encoding says')
  }
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return new ValidationError('invalid request body', `the request body could not be read (HTTP ${status})`)
  }
  return err
}

export function tooLarge(limitBytes: number): PayloadTooLargeError {
  return new PayloadTooLargeError('request body too large', `the request body exceeds the limit of ${limitBytes} bytes`)
}

/**
 * The raw body of a signed webhook, exactly as sent (signatures are over these bytes), at most
 * `limitBytes`. Read with listeners rather than `for await`: leaving a `for await` early
 * destroys the request and its socket, and the 413 could then not be sent.
 */
export function readRawBody(ctx: ApiContext, limitBytes: number): Promise<Buffer> {
  const encoding = (ctx.get('Content-Encoding') || 'identity').toLowerCase()
  // Webhook senders do not compress, and a signature is over the bytes as sent.
  if (encoding !== 'identity') return Promise.reject(new UnsupportedMediaTypeError('unsupported content encoding', 'send the webhook body uncompressed'))
  if ((ctx.request.length ?? 0) > limitBytes) return Promise.reject(tooLarge(limitBytes))
  const req = ctx.req
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const done = (settle: () => void) => {
      req.off('data', onData).off('end', onEnd).off('error', onAbort).off('close', onAbort)
      settle()
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= limitBytes) return void chunks.push(chunk)
      // The rest is not read; the 413 says Connection: close.
      req.pause()
      done(() => reject(tooLarge(limitBytes)))
    }
    const onEnd = () => done(() => resolve(Buffer.concat(chunks)))
    const onAbort = () => done(() => reject(new ValidationError('request aborted', 'the client closed the connection before the body was complete')))
    req.on('data', onData).once('end', onEnd).once('error', onAbort).once('close', onAbort)
  })
}
