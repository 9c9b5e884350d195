/**
 * What the middleware chain leaves on `ctx.state` for the layers after it, and the context
 * type every middleware and route sees.
 */
import type { User } from '../auth/users.js'
import type Koa from 'koa'
import type Router from '@koa/router'
import type { Logger } from '../log.js'
import type { TraceContext } from './tracing.js'

/** The authenticated caller, as the authenticator (auth issue) establishes it. */
export interface Principal {
  /** Local user id; added to the request's log lines as `userId`. */
  userId: string
  /** How the caller proved who they are, e.g. `jwt` or `api_key`. */
  method: string
  scopes: readonly string[]
  /** The API key used, when `method` is `api_key`. */
  apiKeyId?: string
  /** The user as read while authenticating, so handlers need not read it again. */
  user?: User
}

export interface ApiState {
  /** Correlation id: the accepted incoming `X-Request-Id`, or a generated UUID. */
  requestId: string
  /** The caller sent an `X-Request-Id` that was refused and replaced. */
  requestIdReplaced: boolean
  trace: TraceContext
  /** Child logger carrying `requestId`, `traceId`, `spanId` (and `userId` once known). */
  log: Logger
  /** Route template (OpenAPI form, `/api/v1/nodes/{nodeId}`) once a route matched. */
  route?: string
  principal?: Principal
}

export type ApiContext = Koa.ParameterizedContext<ApiState, Router.RouterParamContext<ApiState>>
export type ApiMiddleware = Koa.Middleware<ApiState, Router.RouterParamContext<ApiState>>
