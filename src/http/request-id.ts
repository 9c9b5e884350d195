/**
 * Correlation id: first in the chain (spec, Authentication: "correlation id, tracing, metrics,
 * logging, ..."). A caller's `X-Request-Id` is kept when it is sane, so one id follows a call
 * through proxies and into our logs; anything else is replaced by a fresh UUID. The id chosen is
 * echoed in the response header on every answer, errors included.
 */
import crypto from 'node:crypto'
import type { ApiMiddleware } from './context.js'

export const REQUEST_ID_HEADER = 'X-Request-Id'

/**
 * UUIDs, ULIDs, base64 and the usual proxy ids fit: up to 128 characters starting with a letter
 * or digit, from a set that cannot break a header, a log line or a URL we put it in.
 */
const SANE_REQUEST_ID = /^[A-Za-z0-9][A-Za-z0-9._:=+/-]{0,127}$/

export function acceptRequestId(incoming: string | string[] | undefined): string | undefined {
  if (typeof incoming !== 'string') return undefined
  return SANE_REQUEST_ID.test(incoming) ? incoming : undefined
}

export function correlationId(): ApiMiddleware {
  return async (ctx, next) => {
    const incoming = ctx.req.headers['x-request-id']
    const accepted = acceptRequestId(incoming)
    ctx.state.requestId = accepted ?? crypto.randomUUID()
    // The refused value itself is never logged: it is whatever the caller chose to send.
    ctx.state.requestIdReplaced = incoming !== undefined && accepted === undefined
    ctx.set(REQUEST_ID_HEADER, ctx.state.requestId)
    await next()
  }
}
