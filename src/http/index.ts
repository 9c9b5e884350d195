/** Public surface of the HTTP layer (docs/http.md). Domain route factories import from here. */
export { createApiApp, DEFAULT_API_INFO, type ApiApp, type ApiAppOptions } from './app.js'
export { hasScope, type Authenticator, type RateLimiter, type RouteAuth } from './auth.js'
export { DEFAULT_BODY_LIMIT_BYTES } from './body.js'
export type { ApiContext, ApiMiddleware, ApiState, Principal } from './context.js'
export { errorBodySchema, MethodNotAllowedError, UnsupportedMediaTypeError, type ErrorBody } from './http-errors.js'
export { buildOpenApiDocument, OPENAPI_PATH, type ApiInfo, type OpenApiDocument } from './openapi.js'
export {
  decodeCursor,
  DEFAULT_PAGE_SIZE,
  encodeCursor,
  MAX_PAGE_SIZE,
  pageSchema,
  paginateKeyset,
  paginationQuery,
  type KeysetOptions,
  type KeysetPosition,
  type Page,
  type PaginationQuery,
} from './pagination.js'
export { REQUEST_ID_HEADER } from './request-id.js'
export {
  defineRoute,
  errorResponse,
  type ApiRoute,
  type HttpMethod,
  type ResponseSpec,
  type RouteBuilder,
  type RouteHandler,
  type RouteInput,
  type RouteReply,
  type RouteSpec,
} from './route.js'
export { startHttpServer, type HttpApp, type HttpServerOptions, type RunningHttpServer } from './server.js'
export { outgoingTraceparent, type TraceContext } from './tracing.js'
export { z } from './zod.js'
