/**
 * Metrics, third in the chain: counts and times every request by method, route template and
 * final status. The route label is the template a route was declared with, so ids in paths
 * never become label values; requests that matched no route share the label `unmatched`.
 */
import type { Metrics } from '../metrics.js'
import type { ApiMiddleware } from './context.js'

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'])
export const UNMATCHED_ROUTE = 'unmatched'

export function httpMetrics(metrics: Metrics): ApiMiddleware {
  return async (ctx, next) => {
    // Arbitrary method names would be unbounded label values.
    const method = KNOWN_METHODS.has(ctx.method) ? ctx.method : 'OTHER'
    const started = process.hrtime.bigint()
    metrics.httpRequestsInFlight.inc({ method })
    try {
      await next()
    } finally {
      metrics.httpRequestsInFlight.dec({ method })
      // The error mapping sits inside this middleware, so ctx.status is the status sent.
      const labels = { method, route: ctx.state.route ?? UNMATCHED_ROUTE, status: String(ctx.status) }
      metrics.httpRequestsTotal.inc(labels)
      metrics.httpRequestDurationSeconds.observe(labels, Number(process.hrtime.bigint() - started) / 1e9)
    }
  }
}
