/**
 * The authentication slot of the chain (spec, Authentication: "... logging, authentication,
 * rate limiting, scope check, handler"). It runs per route, because each route declares what it
 * needs:
 *
 * - `auth: 'none'`             served to anyone (health, readiness, metrics, OpenAPI, public key);
 * - `auth: 'authenticated'`    any authenticated caller (spec: "authenticated");
 * - `auth: { scope: 'admin' }` an authenticated caller holding the scope, else 403.
 *
 * How a credential is checked (JWT, API key) belongs to the auth issue, which passes an
 * `Authenticator` (and a `RateLimiter`) to `createApiApp`. Until one is configured, a route that
 * needs authentication answers 401: it is never served unauthenticated by omission.
 */
import { hasScope as grants } from '../auth/scopes.js'
import { ForbiddenError, UnauthorizedError } from '../errors.js'
import { bindRequestLog } from './access-log.js'
import type { ApiContext, ApiMiddleware, Principal } from './context.js'

export type RouteAuth = 'none' | 'authenticated' | { scope: string }

/**
 * Establishes the caller from the request (headers only; the body is not read yet). Throws
 * UnauthorizedError when the credential is missing or invalid.
 */
export type Authenticator = (ctx: ApiContext) => Promise<Principal>

/** Throws RateLimitedError (429 with Retry-After) when the caller is over its budget. */
export type RateLimiter = (principal: Principal, ctx: ApiContext) => Promise<void>

export interface AuthSlot {
  authenticate?: Authenticator
  rateLimit?: RateLimiter
}

export function requiresAuthentication(auth: RouteAuth): boolean {
  return auth !== 'none'
}

export function requiredScope(auth: RouteAuth): string | undefined {
  return typeof auth === 'object' ? auth.scope : undefined
}

/** `*` grants every scope but `admin` (src/auth/scopes.ts). */
export function hasScope(principal: Principal, scope: string): boolean {
  return grants(principal.scopes, scope)
}

export function authorize(auth: RouteAuth, slot: AuthSlot): ApiMiddleware {
  if (!requiresAuthentication(auth)) return (_ctx, next) => next()
  const scope = requiredScope(auth)
  return async (ctx, next) => {
    if (!slot.authenticate) {
      throw new UnauthorizedError('unauthorized', 'this route requires authentication, and none is configured on this server')
    }
    const principal = await slot.authenticate(ctx)
    ctx.state.principal = principal
    bindRequestLog(ctx.state, { userId: principal.userId })
    if (slot.rateLimit) await slot.rateLimit(principal, ctx)
    if (scope !== undefined && !hasScope(principal, scope)) {
      throw new ForbiddenError('forbidden', `this route requires the scope "${scope}"`)
    }
    await next()
  }
}
