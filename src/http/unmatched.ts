/**
 * Requests no route answered, turned into the standard error body: an unknown path is 404, a
 * known path with another method is 405 with `Allow` (computed by @koa/router's
 * allowedMethods), a method the router does not implement at all is 501.
 */
import { NotFoundError, UnauthorizedError } from '../errors.js'
import type { AuthSlot } from './auth.js'
import type { ApiMiddleware } from './context.js'
import { MethodNotAllowedError, NotImplementedError } from './http-errors.js'

/** Everything under this prefix needs authentication, unknown paths included. */
const AUTHENTICATED_PREFIX = '/api/v1/'

export function unmatched(slot: AuthSlot = {}): ApiMiddleware {
  return async (ctx, next) => {
    await next()
    if (ctx.body !== undefined && ctx.body !== null) return
    // An anonymous caller must not learn which paths and methods exist under /api/v1: it gets
    // the 401 a real route would give before any 404 or 405.
    if (ctx.path.startsWith(AUTHENTICATED_PREFIX) && ctx.state.principal === undefined && [404, 405, 501].includes(ctx.status)) {
      if (!slot.authenticate) throw new UnauthorizedError('unauthorized', 'this path requires authentication, and none is configured on this server')
      ctx.state.principal = await slot.authenticate(ctx)
    }
    if (ctx.status === 405) throw new MethodNotAllowedError(ctx.method, ctx.path, ctx.response.get('Allow'))
    if (ctx.status === 501) throw new NotImplementedError('unsupported method', `the HTTP method ${ctx.method} is not supported by this server`)
    if (ctx.status === 404 && ctx.state.route === undefined) {
      throw new NotFoundError('not found', `no route for ${ctx.method} ${ctx.path}`)
    }
  }
}
