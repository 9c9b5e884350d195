/**
 * Logging, fourth in the chain: one child logger per request carrying `requestId`, `traceId`
 * and `spanId` (handlers get it as `log` and must use it, so every line of a request can be
 * found by its id), and one access line per request when it is answered.
 *
 * The access line names the method, path (without the query string, which may carry cursors
 * or, one day, something private), route template, status and duration. It never carries a
 * body or a header other than the user agent: Authorization and X-API-Key stay out of logs.
 */
import type { Logger } from '../log.js'
import type { ApiContext, ApiMiddleware, ApiState } from './context.js'
import { UNMATCHED_ROUTE } from './http-metrics.js'

const MAX_USER_AGENT = 200
/** Load balancers and Prometheus poll these every few seconds; their lines go to debug. */
const PROBE_ROUTES = new Set(['/health', '/readyz', '/metrics'])

/** Fields added to every later line of this request's log (authentication adds `userId`). */
export function bindRequestLog(state: ApiState, fields: Record<string, unknown>): void {
  const bind = (state as RequestLogState)[BIND]
  if (bind) bind(fields)
  else state.log = state.log.child(fields)
}

const BIND = Symbol('bindRequestLog')
type RequestLogState = ApiState & { [BIND]?: (fields: Record<string, unknown>) => void }

/**
 * `ctx.state.log` is made at its first use: a pino child logger costs about 5% of a request's
 * CPU, and most requests (a probe, a quiet read at level info) never log through it.
 */
function lazyRequestLog(state: ApiState, logger: Logger): RequestLog {
  const request: RequestLog = {
    bindings: { requestId: state.requestId, traceId: state.trace.traceId, spanId: state.trace.spanId },
    log: undefined,
  }
  Object.defineProperty(state, 'log', {
    configurable: true,
    enumerable: true,
    get: () => (request.log ??= logger.child(request.bindings)),
    set: (value: Logger) => {
      request.log = value
    },
  })
  ;(state as RequestLogState)[BIND] = (fields) => {
    if (request.log) request.log = request.log.child(fields)
    else Object.assign(request.bindings, fields)
  }
  return request
}

interface RequestLog {
  /** The fields of every line of this request while its logger is not made yet. */
  bindings: Record<string, unknown>
  log: Logger | undefined
}

/**
 * Binding fields known to be plain ids, never a secret: an access line carrying only these and
 * its own fixed fields needs no redaction (redaction with wildcard paths visits every field of
 * every line, ~5% of a request's CPU).
 */
const PLAIN_BINDINGS = new Set(['requestId', 'traceId', 'spanId', 'userId'])

/**
 * Writes access lines of requests that never made their logger: the same line a child logger
 * would write (bindings first, then the line), through one child without redaction, remade
 * when the logger's level changes.
 */
function plainLineWriter(logger: Logger): (level: 'warn' | 'debug' | 'info', fields: Record<string, unknown>) => void {
  let plain: Logger | undefined
  return (level, fields) => {
    if (plain?.level !== logger.level) plain = logger.child({}, { redact: { paths: [] }, level: logger.level })
    plain[level](fields, ANSWERED)
  }
}

const ANSWERED = 'request answered'

export function accessLog(logger: Logger): ApiMiddleware {
  const writePlain = plainLineWriter(logger)
  return async (ctx, next) => {
    const started = process.hrtime.bigint()
    const request = lazyRequestLog(ctx.state, logger)
    try {
      await next()
    } finally {
      const status = ctx.status
      const level = status >= 500 ? 'warn' : status < 400 && PROBE_ROUTES.has(ctx.state.route ?? UNMATCHED_ROUTE) ? 'debug' : 'info'
      if (logger.isLevelEnabled(level)) {
        const line = answerLine(ctx, started)
        // ctx.state.log carries what authentication added (`userId`); when it was never made,
        // its bindings go first in the line, as the child logger would have written them.
        if (request.log === undefined && Object.keys(request.bindings).every((key) => PLAIN_BINDINGS.has(key))) {
          writePlain(level, { ...request.bindings, ...line })
        } else {
          ctx.state.log[level](line, ANSWERED)
        }
      }
    }
  }
}

function answerLine(ctx: ApiContext, started: bigint): Record<string, unknown> {
  return {
    method: ctx.method,
    path: ctx.path,
    route: ctx.state.route ?? UNMATCHED_ROUTE,
    status: ctx.status,
    durationMs: Math.round(Number(process.hrtime.bigint() - started) / 1e4) / 100,
    responseBytes: ctx.response.length,
    remoteAddress: ctx.ip,
    userAgent: ctx.get('User-Agent').slice(0, MAX_USER_AGENT) || undefined,
    requestIdReplaced: ctx.state.requestIdReplaced || undefined,
  }
}
