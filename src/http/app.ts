/**
 * The api-server's Koa app. The chain, outermost first (spec, Authentication: "correlation id,
 * tracing, metrics, logging, authentication, rate limiting, scope check, handler"):
 *
 *   correlationId -> tracing -> httpMetrics -> accessLog -> errorMapping -> declaredBodyLimit
 *   -> router: [route template, authorize (authentication, rate limiting, scope), jsonBody,
 *      validation + handler] -> unmatched (404 / 405 / 501)
 *
 * Error mapping sits right inside the logging so the access line and metrics record the status
 * actually sent, and around everything that can fail on a caller's account.
 */
import Koa from 'koa'
import Router from '@koa/router'
import type { Db } from '../db/knex.js'
import type { EventBus } from '../events/bus.js'
import type { Logger } from '../log.js'
import type { Metrics } from '../metrics.js'
import { accessLog } from './access-log.js'
import { authorize, type Authenticator, type RateLimiter } from './auth.js'
import { DEFAULT_BODY_LIMIT_BYTES, declaredBodyLimit, jsonBody } from './body.js'
import type { ApiContext, ApiMiddleware, ApiState } from './context.js'
import { errorMapping } from './error-mapping.js'
import { httpMetrics } from './http-metrics.js'
import { buildOpenApiDocument, type ApiInfo, type OpenApiDocument } from './openapi.js'
import { createReadinessCheck, DEFAULT_READINESS_TIMEOUT_MS, type ComponentCheck } from './readiness.js'
import { correlationId } from './request-id.js'
import type { ApiRoute } from './route.js'
import { systemRoutes } from './system-routes.js'
import { tracing } from './tracing.js'
import { unmatched } from './unmatched.js'

export interface ApiAppOptions {
  db: Db
  /** Checked by /readyz when the server has one (the auth server has none). */
  bus?: EventBus
  logger: Logger
  metrics: Metrics
  /** HTTP_BODY_LIMIT_BYTES; 1 MiB when not given. */
  bodyLimitBytes?: number
  /** Checks credentials (auth issue). Without it, routes that need authentication answer 401. */
  authenticate?: Authenticator
  /** Per-caller rate limit, run after authentication (auth issue). */
  rateLimit?: RateLimiter
  /** The domain routes: `defineRoute(...)` results, usually from one factory per domain. */
  routes?: readonly ApiRoute[]
  readinessTimeoutMs?: number
  /** Components /readyz checks besides the database and bus (the payment service's providers). */
  readinessComponents?: Record<string, ComponentCheck>
  info?: ApiInfo
  /**
   * Behind a reverse proxy that sets X-Forwarded-For: log the client's address rather than
   * the proxy's. Off by default, since a direct client could forge the header.
   */
  trustProxy?: boolean
  /**
   * With `trustProxy`: the number of proxies in front (HTTP_MAX_IPS_COUNT, default 1). Koa then
   * believes only that many rightmost X-Forwarded-For entries; its own default (0) would take
   * the leftmost, which the client writes.
   */
  maxIpsCount?: number
}

export const DEFAULT_MAX_IPS_COUNT = 1

export type ApiApp = Koa<ApiState, ApiContext>

export const DEFAULT_API_INFO: ApiInfo = {
  title: 'nodeplane control plane API',
  version: '1',
  description: 'Errors are `{ "error", "details" }`; lists are cursor-paginated (`limit`, `cursor` -> `items`, `next_cursor`).',
}

export function createApiApp(options: ApiAppOptions): ApiApp {
  const bodyLimitBytes = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES
  const readiness = createReadinessCheck(options, options.readinessTimeoutMs ?? DEFAULT_READINESS_TIMEOUT_MS)

  // Built at the first request for it, then kept: building takes 0.1-0.3 s of CPU, which every
  // api-server start (and every test's app) paid when it was built here. The route set is fixed
  // in code, so the authorisation-matrix test, which reads the whole document, is what catches a
  // schema the generator cannot describe.
  let document: OpenApiDocument | undefined
  const routes: ApiRoute[] = [
    ...systemRoutes({ readiness, metrics: options.metrics, openapi: () => (document ??= buildOpenApiDocument(routes, options.info ?? DEFAULT_API_INFO)) }),
    ...(options.routes ?? []),
  ]

  const router = new Router<ApiState, ApiContext>()
  const seen = new Set<string>()
  for (const route of routes) {
    const key = `${route.method} ${route.routerPath}`
    if (seen.has(key)) throw new Error(`route ${route.method.toUpperCase()} ${route.path} is defined twice`)
    seen.add(key)
    const chain: ApiMiddleware[] = [
      markRoute(route.path),
      authorize(route.auth, options),
      ...(route.hasBody ? [jsonBody(bodyLimitBytes)] : []),
      route.handle,
    ]
    router[route.method](route.routerPath, ...chain)
  }

  const app: ApiApp = new Koa<ApiState, ApiContext>({
    proxy: options.trustProxy ?? false,
    maxIpsCount: options.maxIpsCount ?? DEFAULT_MAX_IPS_COUNT,
  })
  // Errors are answered and logged by errorMapping; this only catches what escapes it
  // (a failure while streaming a response), and keeps Koa from printing to stderr.
  app.on('error', (err: unknown, ctx?: ApiContext) => {
    const log = ctx?.state.log ?? options.logger
    log.error({ err }, 'unhandled HTTP error')
  })

  app.use(correlationId())
  app.use(tracing())
  app.use(httpMetrics(options.metrics))
  app.use(accessLog(options.logger))
  app.use(errorMapping())
  app.use(declaredBodyLimit(bodyLimitBytes))
  app.use(unmatched(options))
  app.use(router.routes())
  app.use(router.allowedMethods())
  return app
}

function markRoute(template: string): ApiMiddleware {
  return async (ctx, next) => {
    ctx.state.route = template
    await next()
  }
}
