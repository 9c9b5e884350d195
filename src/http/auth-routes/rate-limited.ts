/**
 * Puts the auth server's per-client rate limit in front of a route, before its body is read:
 * a flood of requests is refused without parsing (or validating) what it sends. The route's
 * JSON body parser moves behind the limit, so the route is handed to `createApiApp` as one
 * without a body of its own (its OpenAPI description still documents the body).
 *
 * The client is the TCP peer's address (`ctx.ip`); behind a reverse proxy that sets
 * X-Forwarded-For, start the server with `trustProxy` so each client gets its own budget.
 */
import type { AuthRateLimiter } from '../../auth/auth-rate-limit.js'
import { jsonBody } from '../body.js'
import type { ApiContext, ApiMiddleware } from '../context.js'
import type { ApiRoute } from '../route.js'

export function clientKey(ctx: ApiContext): string {
  return `ip:${ctx.ip}`
}

export function withAuthRateLimit(route: ApiRoute, limiter: AuthRateLimiter, bodyLimitBytes: number): ApiRoute {
  const parseBody = route.hasBody ? jsonBody(bodyLimitBytes) : undefined
  const handle: ApiMiddleware = async (ctx, next) => {
    await limiter.hit(clientKey(ctx))
    if (parseBody) await parseBody(ctx, () => route.handle(ctx, next))
    else await route.handle(ctx, next)
  }
  return { ...route, hasBody: false, handle }
}
