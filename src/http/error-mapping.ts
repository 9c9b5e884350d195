/**
 * The one place a thrown error becomes an HTTP answer (ARCHITECTURE.md, Errors). It sits right
 * after the logging middleware, so the access line and the metrics see the status sent.
 *
 * - DomainError -> its `status`, `{ error: message, details }`; RateLimitedError adds
 *   Retry-After; the HTTP layer's own errors add their headers (Allow on 405). Body parser
 *   failures arrive here already turned into DomainErrors (body.ts).
 * - a 4xx thrown with `ctx.throw` (http-errors, `expose: true`) -> that status and message.
 * - the database unreachable or restarting (src/db/errors.ts) -> 503 with Retry-After: the
 *   request may succeed shortly; logged as a warning, not as a failure of ours.
 * - anything else -> 500 `{ error: "internal error", details: "request <id> failed; see server
 *   logs" }`; the error and its stack go to the log with the request id, never to the body.
 *
 * A ZodError escaping a handler is a 500 on purpose: request input is validated by the route
 * definition (400 naming the field); a schema failing deeper down is a server bug (a database row
 * or a response not matching its schema), and blaming the caller for it would hide the bug.
 */
import { isDatabaseUnavailable } from '../db/errors.js'
import { DomainError, RateLimitedError } from '../errors.js'
import type { ApiContext, ApiMiddleware } from './context.js'
import { ClientHttpError, HttpError, type ErrorBody } from './http-errors.js'
import { REQUEST_ID_HEADER } from './request-id.js'

export interface ErrorAnswer {
  status: number
  body: ErrorBody
  headers: Record<string, string>
  /** Logged at error level with the stack: nobody but us can act on it. */
  unexpected: boolean
  /** For the log only: what the driver said (a 503's cause), never sent to the client. */
  cause?: string
}

/** A restarting Postgres is back within seconds; readiness (/readyz) tells a balancer sooner. */
const DATABASE_RETRY_AFTER_SECONDS = 2

/** Headers that survive an error: set by the chain or the server, not by the failed handler. */
const KEPT_HEADERS = new Set([REQUEST_ID_HEADER.toLowerCase(), 'connection'])

export function errorMapping(): ApiMiddleware {
  return async (ctx, next) => {
    try {
      await next()
    } catch (err) {
      respondWithError(ctx, err)
    }
  }
}

export function respondWithError(ctx: ApiContext, err: unknown): void {
  const answer = toErrorAnswer(err, ctx.state.requestId)
  if (answer.unexpected) ctx.state.log.error({ err }, 'request failed')
  else if (answer.status >= 500) ctx.state.log.warn({ error: answer.body.error, details: answer.body.details, ...(answer.cause ? { cause: answer.cause } : {}) }, 'request failed')

  // Nothing more can be said once the response started, or when the client is gone.
  if (ctx.headerSent || !ctx.writable) return
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
  const clientError = fromExposedHttpError(err)
  if (clientError) return toErrorAnswer(clientError, requestId)
  if (isDatabaseUnavailable(err)) {
    return {
      status: 503,
      body: { error: 'service unavailable', details: `the database cannot be reached; retry in ${DATABASE_RETRY_AFTER_SECONDS} s (request ${requestId})` },
      headers: { 'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS) },
      unexpected: false,
      cause: driverReason(err),
    }
  }
  return {
    status: 500,
    body: { error: 'internal error', details: `request ${requestId} failed; see server logs` },
    headers: {},
    unexpected: true,
  }
}

/** `ctx.throw(4xx, message)` from Koa or a library: that message was meant for the client. */
function fromExposedHttpError(err: unknown): DomainError | undefined {
  if (!(err instanceof Error)) return undefined
  const { status, expose } = err as Error & { status?: unknown; expose?: unknown }
  if (typeof status !== 'number' || status < 400 || status >= 500 || expose !== true) return undefined
  return new ClientHttpError(status, err.message)
}

function driverReason(err: unknown): string {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown }
  return [typeof code === 'string' ? code : undefined, typeof message === 'string' ? message.slice(0, 200) : undefined].filter(Boolean).join(': ')
}
