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
import type { ApiMiddleware } from './context.js'
import { UNMATCHED_ROUTE } from './http-metrics.js'

const MAX_USER_AGENT = 200
/** Load balancers and Prometheus poll these every few seconds; their lines go to debug. */
const PROBE_ROUTES = new Set(['/health', '/readyz', '/metrics'])

export function accessLog(logger: Logger): ApiMiddleware {
  return async (ctx, next) => {
    const started = process.hrtime.bigint()
    ctx.state.log = logger.child({
      requestId: ctx.state.requestId,
      traceId: ctx.state.trace.traceId,
      spanId: ctx.state.trace.spanId,
    })
    try {
      await next()
    } finally {
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
      // ctx.state.log, not the logger made above: authentication adds `userId` to it.
      if (status >= 500) ctx.state.log.warn(line, 'request answered')
      else if (status < 400 && PROBE_ROUTES.has(line.route)) ctx.state.log.debug(line, 'request answered')
      else ctx.state.log.info(line, 'request answered')
    }
  }
}
