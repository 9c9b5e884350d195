/**
 * The one place a thrown error becomes an HTTP answer (ARCHITECTURE.md, Errors). It sits right
 * after the logging middleware, so the access line and the metrics see the status sent.
 *
 * - DomainError -> its `status`, `{ error: message, details }`; RateLimitedError adds
 *   Retry-After; the HTTP layer's own errors add their headers (Allow on 405).
 * - body parser failures -> 400 (malformed JSON), 413 (over the limit), 415 (encoding/charset).
 * - anything else -> 500 `{ error: "internal error", details: "request <id> failed; see server
 *   logs" }`; the error and its stack go to the log with the request id, never to the body.
 *
 * A ZodError escaping a handler is a 500 on purpose: request input is validated by the route
 * definition (400 naming the field); a schema failing deeper down is a server bug (a database row
 * or a response not matching its schema), and blaming the caller for it would hide the bug.
 */
import { DomainError, PayloadTooLargeError, RateLimitedError, ValidationError } from '../errors.js'
import type { ApiContext, ApiMiddleware } from './context.js'
import { ClientHttpError, HttpError, UnsupportedMediaTypeError, type ErrorBody } from './http-errors.js'
import { REQUEST_ID_HEADER } from './request-id.js'

export interface ErrorAnswer {
  status: number
  body: ErrorBody
  headers: Record<string, string>
  /** Logged at error level with the stack: nobody but us can act on it. */
  unexpected: boolean
}

/** Headers that survive an error: set by the chain or the server, not by the failed handler. */
const KEPT_HEADERS = new Set([REQUEST_ID_HEADER.toLowerCase(), 'connection'])

export function errorMapping(): ApiMiddleware {
  return async (ctx, next) => {
    try {
      await next()
    } catch (err) {
      if (ctx.headerSent || !ctx.writable) {
        ctx.state.log.error({ err }, 'request failed after the response started')
        return
      }
      respondWithError(ctx, err)
    }
  }
}

export function respondWithError(ctx: ApiContext, err: unknown): void {
  const answer = toErrorAnswer(err, ctx.state.requestId)
  if (answer.unexpected) ctx.state.log.error({ err }, 'request failed')
  else if (answer.status >= 500) ctx.state.log.warn({ error: answer.body.error, details: answer.body.details }, 'request failed')

  for (const name of ctx.res.getHeaderNames()) {
    if (!KEPT_HEADERS.has(name)) ctx.remove(name)
  }
  for (const [name, value] of Object.entries(answer.headers)) ctx.set(name, value)
  ctx.status = answer.status
  ctx.body = answer.body
}

export function toErrorAnswer(err: unknown, requestId: string): ErrorAnswer {
  // A DomainError claiming 500 (ConfigError) is as unexpected as any other failure.
  if (err instanceof DomainError && err.status !== 500) {
    const headers: Record<string, string> = err instanceof HttpError ? { ...err.headers } : {}
    if (err instanceof RateLimitedError) headers['Retry-After'] = String(Math.max(1, Math.ceil(err.retryAfterSeconds)))
    // The rest of an oversized body is not read; closing spares draining it.
    if (err.status === 413) headers.Connection = 'close'
    return { status: err.status, body: { error: err.message, details: err.details }, headers, unexpected: false }
  }
  const parserError = fromBodyParser(err)
  if (parserError) return toErrorAnswer(parserError, requestId)
  return {
    status: 500,
    body: { error: 'internal error', details: `request ${requestId} failed; see server logs` },
    headers: {},
    unexpected: true,
  }
}

/**
 * co-body / raw-body (under koa-body) throw http-errors style errors with a `type`; their
 * messages can quote the request body, so each becomes one of ours with a fixed text.
 */
function fromBodyParser(err: unknown): DomainError | undefined {
  if (!(err instanceof Error)) return undefined
  const { status, type, limit, expose } = err as Error & { status?: unknown; type?: unknown; limit?: unknown; expose?: unknown }
  if (typeof status !== 'number' || status < 400 || status >= 500) return undefined
  switch (type) {
    case 'entity.too.large':
      return new PayloadTooLargeError('request body too large', `the request body exceeds the limit of ${String(limit)} bytes`)
    case 'encoding.unsupported':
      return new UnsupportedMediaTypeError('unsupported content encoding', 'send the body uncompressed, or gzip, deflate or br encoded')
    case 'charset.unsupported':
      return new UnsupportedMediaTypeError('unsupported charset', 'send the JSON body as UTF-8')
    case 'request.aborted':
      return new ValidationError('request aborted', 'the client closed the connection before the body was complete')
    case 'request.size.invalid':
      return new ValidationError('invalid request body', 'the body length does not match Content-Length')
    default:
      // co-body marks a JSON.parse failure with status 400; its message may quote the body.
      if (err instanceof SyntaxError) {
        return new ValidationError('malformed JSON', 'the request body is not valid JSON (an object or an array is expected)')
      }
      // `ctx.throw(4xx, message)` from Koa or a library: the message was meant for the client.
      if (expose === true) return new ClientHttpError(status, err.message)
      return undefined
  }
}
