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
function lazyRequestLog(state: ApiState, logger: Logger): void {
  const bindings: Record<string, unknown> = { requestId: state.requestId, traceId: state.trace.traceId, spanId: state.trace.spanId }
  let log: Logger | undefined
  Object.defineProperty(state, 'log', {
    configurable: true,
    enumerable: true,
    get: () => (log ??= logger.child(bindings)),
    set: (value: Logger) => {
      log = value
    },
  })
  ;(state as RequestLogState)[BIND] = (fields) => {
    if (log) log = log.child(fields)
    else Object.assign(bindings, fields)
  }
}

export function accessLog(logger: Logger): ApiMiddleware {
  return async (ctx, next) => {
    const started = process.hrtime.bigint()
    lazyRequestLog(ctx.state, logger)
    try {
      await next()
    } finally {
      const status = ctx.status
      const level = status >= 500 ? 'warn' : status < 400 && PROBE_ROUTES.has(ctx.state.route ?? UNMATCHED_ROUTE) ? 'debug' : 'info'
      if (logger.isLevelEnabled(level)) logAnswer(ctx, level, started)
    }
  }
}

function logAnswer(ctx: ApiContext, level: 'warn' | 'debug' | 'info', started: bigint): void {
  const status = ctx.status
  const line = {
    method: ctx.method,
    path: ctx.path,
    route: ctx.state.route ?? UNMATCHED_ROUTE,
    status,
    durationMs: Math.round(Number(process.hrtime.bigint() - started) / 1e4) / 100,
    responseBytes: ctx.response.length,
    remoteAddress: ctx.ip,
    userAgent: ctx.get('User-Agent').slice(0, MAX_USER_AGENT) || undefined,
    requestIdReplaced: ctx.state.requestIdReplaced || undefined,
  }
  // ctx.state.log: authentication adds `userId` to it.
  ctx.state.log[level](line, 'request answered')
}
