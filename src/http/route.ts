/**
 * `defineRoute`: one declaration per endpoint gives the router its handler, the OpenAPI
 * document its operation, and the handler typed, validated input, all from the same zod schemas.
 *
 * ```ts
 * defineRoute({
 *   method: 'get',
 *   path: '/api/v1/nodes/{nodeId}/uptime',          // OpenAPI form; mounted as /:nodeId
 *   summary: 'Rolling uptime summary',
 *   tags: ['uptime'],
 *   auth: { scope: 'nodes:read' },
 *   request: { params: z.object({ nodeId: ... }), query: z.object({ window: ... }) },
 *   responses: { 200: uptimeSummary, 404: errorResponse('no such node') },
 * }).handle(async ({ params, query, principal, log }) => ({ status: 200, body: { ... } }))
 * ```
 *
 * The handler is given in a second step on purpose: once the declaration is fixed, TypeScript
 * checks the reply against it exactly (`status: 'ready'` stays the literal the schema wants);
 * in one object literal, inference widens such literals to `string` and rejects correct code.
 *
 * JSON field names are snake_case, written so in the schemas (spec field names as-is); nothing
 * converts case. A response body is parsed through its declared schema before it is sent, so a
 * field the schema does not declare (a key hash, an internal column) never leaves the server,
 * and a body that does not match is a 500 (a server bug), not a silent contract break.
 */
import type { RouteConfig, ResponseConfig } from '@asteasolutions/zod-to-openapi'
import type { AnyZodObject, ZodTypeAny, z } from 'zod'
import type { Logger } from '../log.js'
import { requiredScope, requiresAuthentication, type RouteAuth } from './auth.js'
import type { ApiContext, ApiMiddleware, Principal } from './context.js'
import { errorBodySchema } from './http-errors.js'
import { compileResponseCheck } from './response-check.js'
import { validateRequest, type Output } from './validation.js'

export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete'

export const JSON_CONTENT_TYPE = 'application/json'

/** For answers carrying a plaintext secret (a new API key, tokens): no cache, shared or private, may keep it. */
export const NO_STORE: Readonly<Record<string, string>> = { 'Cache-Control': 'no-store' }

export interface ResponseSpec<S extends ZodTypeAny | undefined = ZodTypeAny | undefined> {
  description: string
  /** Omitted for a response without a body (204). */
  schema?: S
  /** `application/json` unless given (the Prometheus text format names its own). */
  contentType?: string
}

/** A bare schema is shorthand for a JSON response described by its status. */
export type ResponseEntry = ZodTypeAny | ResponseSpec
export type ResponsesSpec = { [status: number]: ResponseEntry }

type EntrySchema<E> = E extends ZodTypeAny ? E : E extends { schema?: infer S } ? (S extends ZodTypeAny ? S : undefined) : undefined
type ReplyTo<K, E> =
  EntrySchema<E> extends ZodTypeAny
    ? { status: K; body: z.input<EntrySchema<E>>; headers?: Record<string, string> }
    : { status: K; body?: undefined; headers?: Record<string, string> }

/** What a handler returns: one of the declared statuses with the body its schema describes. */
export type RouteReply<R extends ResponsesSpec> = { [K in keyof R & number]: ReplyTo<K, R[K]> }[keyof R & number]

export type ParamsSchema = AnyZodObject
export type RequestSchema = ZodTypeAny

export interface RouteInput<P, Q, B, A extends RouteAuth> {
  params: Output<P>
  query: Output<Q>
  body: Output<B>
  /** The authenticated caller; absent on `auth: 'none'` routes. */
  principal: A extends 'none' ? undefined : Principal
  requestId: string
  /** The request's logger (carries requestId, traceId, userId): log through this one. */
  log: Logger
  /** Escape hatch for what the declaration cannot say; prefer the typed fields. */
  ctx: ApiContext
}

export interface RouteSpec<
  P extends ParamsSchema | undefined,
  Q extends RequestSchema | undefined,
  B extends RequestSchema | undefined,
  R extends ResponsesSpec,
  A extends RouteAuth,
> {
  method: HttpMethod
  /** OpenAPI form with `{name}` parameters, under /api/v1 for the public API (spec, Versioning). */
  path: string
  summary: string
  description?: string
  tags?: string[]
  operationId?: string
  auth: A
  request?: { params?: P; query?: Q; body?: B }
  responses: R
}

export type RouteHandler<P, Q, B, R extends ResponsesSpec, A extends RouteAuth> = (input: RouteInput<P, Q, B, A>) => Promise<RouteReply<R>>

export interface RouteBuilder<P, Q, B, R extends ResponsesSpec, A extends RouteAuth> {
  /** Completes the route with its handler. */
  handle(handler: RouteHandler<P, Q, B, R, A>): ApiRoute
}

/** A route with its types erased, ready for `createApiApp({ routes })`. */
export interface ApiRoute {
  readonly method: HttpMethod
  readonly path: string
  /** The same path in @koa/router form (`/:name`). */
  readonly routerPath: string
  readonly auth: RouteAuth
  readonly hasBody: boolean
  readonly openapi: RouteConfig
  /** Validates the request, runs the handler, writes the declared response. */
  readonly handle: ApiMiddleware
}

const PATH_PARAM = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g

export function defineRoute<
  P extends ParamsSchema | undefined = undefined,
  Q extends RequestSchema | undefined = undefined,
  B extends RequestSchema | undefined = undefined,
  R extends ResponsesSpec = ResponsesSpec,
  A extends RouteAuth = RouteAuth,
>(spec: RouteSpec<P, Q, B, R, A>): RouteBuilder<P, Q, B, R, A> {
  const { method, path, auth, request = {}, responses } = spec
  // Checked here, so a mistake stops the daemon at start-up.
  checkPathParams(spec)
  checkResponses(spec)
  const hasBody = request.body !== undefined
  const openapi = toOpenApi(spec as AnyRouteSpec, hasBody)
  const name = `${method.toUpperCase()} ${path}`
  const replies = compileReplies(responses)

  return {
    handle(handler) {
      const handle: ApiMiddleware = async (ctx) => {
        const input = validateRequest(request, { params: ctx.params, query: ctx.query, body: ctx.request.body })
        const reply = await handler({
          ...input,
          principal: ctx.state.principal as RouteInput<P, Q, B, A>['principal'],
          requestId: ctx.state.requestId,
          // A getter: reading ctx.state.log makes the request's child logger, which most
          // handlers never need (access-log.ts).
          get log() {
            return ctx.state.log
          },
          ctx,
        })
        writeReply(ctx, name, replies, reply)
      }
      return { method, path, routerPath: path.replace(PATH_PARAM, ':$1'), auth, hasBody, openapi, handle }
    },
  }
}

/** How each declared status is written: its content type and its schema's parse, built once. */
interface CompiledReply {
  contentType: string
  parse: ((body: unknown) => unknown) | undefined
}

function compileReplies(responses: ResponsesSpec): Map<number, CompiledReply> {
  const replies = new Map<number, CompiledReply>()
  for (const [status, entry] of Object.entries(responses)) {
    const { schema, contentType } = normaliseResponse(entry, Number(status))
    replies.set(Number(status), { contentType, parse: schema ? compileResponseCheck(schema) : undefined })
  }
  return replies
}

function writeReply(
  ctx: ApiContext,
  route: string,
  replies: Map<number, CompiledReply>,
  reply: { status: number; body?: unknown; headers?: Record<string, string> },
): void {
  const compiled = replies.get(reply.status)
  if (compiled === undefined) throw new Error(`${route} answered ${reply.status}, a status its definition does not declare`)
  const { parse, contentType } = compiled
  const body = parse ? parse(reply.body) : undefined
  ctx.status = reply.status
  if (reply.headers) ctx.set(reply.headers)
  if (body === undefined) return
  if (contentType === JSON_CONTENT_TYPE) {
    ctx.type = JSON_CONTENT_TYPE
    ctx.body = JSON.stringify(body)
  } else {
    ctx.type = contentType
    ctx.body = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body)
  }
}

function normaliseResponse(entry: ResponseEntry, status: number): Required<Pick<ResponseSpec, 'description' | 'contentType'>> & ResponseSpec {
  if (isZodSchema(entry)) return { description: describeStatus(status), schema: entry, contentType: JSON_CONTENT_TYPE }
  return { ...entry, contentType: entry.contentType ?? JSON_CONTENT_TYPE }
}

function isZodSchema(value: unknown): value is ZodTypeAny {
  return typeof value === 'object' && value !== null && typeof (value as { safeParse?: unknown }).safeParse === 'function'
}

function checkPathParams(definition: { method: string; path: string; request?: { params?: ParamsSchema } }): void {
  const inPath = [...definition.path.matchAll(PATH_PARAM)].map((m) => m[1] as string).sort()
  const declared = Object.keys(definition.request?.params?.shape ?? {}).sort()
  if (inPath.join(',') !== declared.join(',')) {
    throw new Error(
      `route ${definition.method.toUpperCase()} ${definition.path}: path parameters [${inPath.join(', ')}] ` +
        `do not match request.params [${declared.join(', ')}]`,
    )
  }
  if (!definition.path.startsWith('/')) throw new Error(`route path must start with "/": ${definition.path}`)
}

function checkResponses(definition: { method: string; path: string; responses: ResponsesSpec }): void {
  for (const [status, entry] of Object.entries(definition.responses)) {
    // Koa would fill a body-less 2xx other than 204 with its status text, as text/plain.
    if (!isZodSchema(entry) && entry.schema === undefined && status !== '204') {
      throw new Error(`route ${definition.method.toUpperCase()} ${definition.path}: response ${status} needs a schema (only 204 has no body)`)
    }
  }
}

/** Error answers the chain itself can give, documented on every route they apply to. */
function chainErrorResponses(auth: RouteAuth, validates: boolean, hasBody: boolean): Record<number, string> {
  const errors: Record<number, string> = {}
  if (validates) errors[400] = 'Invalid request: details names each offending field'
  if (requiresAuthentication(auth)) {
    errors[401] = 'Missing or invalid authentication'
    if (requiredScope(auth) !== undefined) errors[403] = `Required scope "${requiredScope(auth)}" missing`
    errors[429] = 'Rate limit exceeded; see Retry-After'
    // Authentication reads the database: every authenticated route can meet it away.
    errors[503] = 'The database cannot be reached for now; see Retry-After'
  }
  if (hasBody) {
    errors[413] = 'Request body over the size limit'
    errors[415] = 'Request body is not application/json'
  }
  errors[500] = 'Unexpected error; details carries the request id to quote'
  return errors
}

type AnyRouteSpec = RouteSpec<ParamsSchema | undefined, RequestSchema | undefined, RequestSchema | undefined, ResponsesSpec, RouteAuth>

function toOpenApi(definition: AnyRouteSpec, hasBody: boolean): RouteConfig {
  const { request = {}, auth } = definition
  const responses: Record<string, ResponseConfig> = {}
  for (const [status, entry] of Object.entries(definition.responses)) {
    const spec = normaliseResponse(entry, Number(status))
    responses[status] = {
      description: spec.description,
      ...(spec.schema ? { content: { [spec.contentType]: { schema: spec.schema } } } : {}),
    }
  }
  const validates = request.params !== undefined || request.query !== undefined || hasBody
  for (const [status, description] of Object.entries(chainErrorResponses(auth, validates, hasBody))) {
    responses[status] ??= { description, content: { [JSON_CONTENT_TYPE]: { schema: errorBodySchema } } }
  }
  const scope = requiredScope(auth)
  return {
    method: definition.method,
    path: definition.path,
    summary: definition.summary,
    ...(definition.description ? { description: definition.description } : {}),
    ...(definition.tags ? { tags: definition.tags } : {}),
    ...(definition.operationId ? { operationId: definition.operationId } : {}),
    // OpenAPI 3.1 lets a non-OAuth requirement list the roles (our scopes) it needs.
    ...(requiresAuthentication(auth) ? { security: [{ [BEARER_SCHEME]: scope ? [scope] : [] }] } : {}),
    request: {
      ...(request.params ? { params: request.params } : {}),
      ...(request.query ? { query: asObjectSchema(request.query) } : {}),
      ...(request.body ? { body: { required: true, content: { [JSON_CONTENT_TYPE]: { schema: request.body } } } } : {}),
    },
    responses,
  }
}

export const BEARER_SCHEME = 'bearerAuth'

function asObjectSchema(schema: RequestSchema): AnyZodObject {
  if (typeof (schema as { shape?: unknown }).shape !== 'object') {
    throw new Error('request.query must be a z.object(...) so each query parameter can be documented')
  }
  return schema as AnyZodObject
}

function describeStatus(status: number): string {
  const known: Record<number, string> = { 200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No content' }
  return known[status] ?? `HTTP ${status}`
}

/** A declared error answer (404, 409...) with the standard `{ error, details }` body. */
export function errorResponse(description: string): ResponseSpec<typeof errorBodySchema> {
  return { description, schema: errorBodySchema }
}
