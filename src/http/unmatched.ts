/**
 * Requests no route answered, turned into the standard error body: an unknown path is 404, a
 * known path with another method is 405 with `Allow` (computed by @koa/router's
 * allowedMethods), a method the router does not implement at all is 501.
 */
import { NotFoundError } from '../errors.js'
import type { ApiMiddleware } from './context.js'
import { MethodNotAllowedError, NotImplementedError } from './http-errors.js'

export function unmatched(): ApiMiddleware {
  return async (ctx, next) => {
    await next()
    if (ctx.body !== undefined && ctx.body !== null) return
    if (ctx.status === 405) throw new MethodNotAllowedError(ctx.method, ctx.path, ctx.response.get('Allow'))
    if (ctx.status === 501) throw new NotImplementedError('unsupported method', `the HTTP method ${ctx.method} is not supported by this server`)
    if (ctx.status === 404 && ctx.state.route === undefined) {
      throw new NotFoundError('not found', `no route for ${ctx.method} ${ctx.path}`)
    }
  }
}
