/**
 * The CLI's HTTP client for `/api/v1`. It sends the credential as `Authorization: Bearer …`
 * and an `X-Request-Id` per request (the server logs it, so a failure can be found there), and
 * turns every failure into the CLI's typed errors, hence its documented exit code:
 *
 *   400/413/422 -> 2, 401 / 403 -> 77, 429 -> 1, 404 -> 3, 409 -> 4, 5xx and unreachable -> 69.
 *
 * The key is never part of a message, a log line or an error: errors carry the URL, the
 * server's `{error, details}` and the request id only.
 */
import crypto from 'node:crypto'
import {
  ConflictError,
  DomainError,
  ForbiddenError,
  NotFoundError,
  RateLimitedError,
  UnauthorizedError,
  UnavailableError,
  ValidationError,
} from '../errors.js'
import type { ApiTarget, KeySource } from './api-target.js'
import { httpTransport, type Transport, type TransportResponse } from './http-transport.js'

export const API_PREFIX = '/api/v1'
/** Above the API's own longest wait (PAYMENT_CALL_TIMEOUT, 30 s, for a card checkout session). */
export const DEFAULT_TIMEOUT_MS = 45_000

/** An HTTP answer the CLI has no better class for (an unexpected 4xx, a redirect); exit 1. */
export class ApiError extends DomainError {
  readonly code = 'api_error'
  constructor(
    readonly status: number,
    message: string,
    details?: string,
  ) {
    super(message, details)
  }
}

export type HttpMethod = 'GET' | 'POST' | 'DELETE'

export interface ApiRequest {
  method: HttpMethod
  /** Under /api/v1, e.g. `/api-keys`. */
  path: string
  query?: Record<string, string | number | undefined>
  body?: unknown
}

export interface ApiClientOptions {
  /** node:http by default; a global fetch also fits. */
  fetch?: Transport
  timeoutMs?: number
}

export interface ServerError {
  error: string
  details?: string
}

export class ApiClient {
  private readonly fetchImpl: Transport
  private readonly timeoutMs: number

  constructor(
    readonly target: ApiTarget,
    options: ApiClientOptions = {},
  ) {
    this.fetchImpl = options.fetch ?? httpTransport
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
  }

  get url(): string {
    return this.target.url
  }

  get<T>(path: string, query?: ApiRequest['query']): Promise<T> {
    return this.request<T>({ method: 'GET', path, query })
  }

  post<T>(path: string, body?: unknown): Promise<T> {
    return this.request<T>({ method: 'POST', path, body })
  }

  delete(path: string): Promise<void> {
    return this.request<void>({ method: 'DELETE', path })
  }

  /** POST, with the success status: for routes whose 200 and 201 mean different things. */
  postWithStatus<T>(path: string, body?: unknown): Promise<{ status: number; body: T }> {
    return this.exchange<T>({ method: 'POST', path, body })
  }

  /** The parsed JSON answer; undefined for 204. Throws the CLI's typed errors. */
  async request<T>(request: ApiRequest): Promise<T> {
    return (await this.exchange<T>(request)).body
  }

  private async exchange<T>(request: ApiRequest): Promise<{ status: number; body: T }> {
    const url = new URL(`${this.target.url}${API_PREFIX}${request.path}`)
    for (const [name, value] of Object.entries(request.query ?? {})) {
      if (value !== undefined) url.searchParams.set(name, String(value))
    }
    const requestId = crypto.randomUUID()
    const headers: Record<string, string> = { Accept: 'application/json', 'X-Request-Id': requestId }
    if (this.target.credential) headers.Authorization = `Bearer ${this.target.credential.key}`
    if (request.body !== undefined) headers['Content-Type'] = 'application/json'

    let response: TransportResponse
    try {
      response = await this.fetchImpl(url, {
        method: request.method,
        headers,
        // Never follow a redirect (neither transport does): the Authorization header must not
        // travel to another address.
        body: request.body === undefined ? undefined : JSON.stringify(request.body),
        signal: AbortSignal.timeout(this.timeoutMs),
      })
    } catch (err) {
      throw unreachable(this.target, err, this.timeoutMs)
    }

    const text = await response.text().catch(() => '')
    if (!response.ok) {
      throw errorFromResponse({
        status: response.status,
        body: text,
        retryAfter: response.headers.get('retry-after'),
        location: response.headers.get('location'),
        url: this.target.url,
        requestId: response.headers.get('x-request-id') ?? requestId,
        keySource: this.target.credential?.source,
      })
    }
    if (response.status === 204 || text.length === 0) return { status: response.status, body: undefined as T }
    try {
      return { status: response.status, body: JSON.parse(text) as T }
    } catch {
      throw new ApiError(response.status, `the API at ${this.target.url} answered with something that is not JSON`, 'check --api-url / NODEPLANE_API_URL: it must name the nodeplane API')
    }
  }
}

export interface FailedResponse {
  status: number
  body: string
  retryAfter?: string | null
  location?: string | null
  url: string
  requestId: string
  keySource?: KeySource
}

/** `{error, details}` when the body is one, else a stand-in naming the status. */
export function parseServerError(status: number, body: string): ServerError {
  try {
    const parsed = JSON.parse(body) as Partial<ServerError>
    if (parsed && typeof parsed.error === 'string') {
      return { error: parsed.error, ...(typeof parsed.details === 'string' ? { details: parsed.details } : {}) }
    }
  } catch {
    // not JSON: a proxy's page, say
  }
  return { error: `HTTP ${status}` }
}

/** The server's reason in one line: `error: details`, or just one of them when they say the same. */
export function serverReason(server: ServerError): string {
  const { error, details } = server
  if (!details || details === error || details.includes(error)) return oneLine(details ?? error)
  return oneLine(`${error}: ${details}`)
}

const LOGIN_HINT: Record<KeySource, string> = {
  flag: 'check the key and run `nodeplane login` again',
  stdin: 'check the key and run `nodeplane login` again',
  prompt: 'check the key and run `nodeplane login` again',
  env: 'NODEPLANE_API_KEY was refused (revoked, expired or mistyped): set a valid key, or unset it and run `nodeplane login`',
  login: 'the stored login was refused (revoked or expired key): run `nodeplane login` with a valid key',
  stack: "nodeplane up's admin key was refused: restart `nodeplane up` (it issues a new one), or run `nodeplane login`",
}

export function errorFromResponse(failed: FailedResponse): Error {
  const server = parseServerError(failed.status, failed.body)
  const reason = serverReason(server)
  const { status, url } = failed
  // For 401 and 403 the error word ("unauthorized", "forbidden") only repeats the status.
  const specific = oneLine(server.details ?? server.error)
  if (status === 401) {
    return new UnauthorizedError(`not authenticated by ${url}: ${specific}`, failed.keySource ? LOGIN_HINT[failed.keySource] : 'run `nodeplane login`, or set NODEPLANE_API_KEY')
  }
  if (status === 403) {
    return new ForbiddenError(`missing scope: ${specific}`, 'use an API key that has it (`nodeplane whoami` shows the scopes of the one in use)')
  }
  if (status === 404) return new NotFoundError(reason)
  if (status === 409) return new ConflictError(reason)
  if (status === 400 || status === 413 || status === 422) return new ValidationError(reason)
  if (status === 429) {
    const seconds = retryAfterSeconds(failed.retryAfter)
    return new RateLimitedError(`rate limited by ${url}: ${reason}`, seconds ?? 60, seconds === undefined ? 'retry later' : `retry in ${seconds} s`)
  }
  if (status >= 500) {
    return new UnavailableError(`the API at ${url} failed with ${status}: ${reason}`, `request id ${failed.requestId}; retry later, or look it up in the server's logs`)
  }
  if (status >= 300 && status < 400) {
    return new ApiError(status, `the API at ${url} redirects (${status}${failed.location ? ` to ${failed.location}` : ''})`, 'use the final address as --api-url / NODEPLANE_API_URL; keys are never sent along a redirect')
  }
  return new ApiError(status, `the API at ${url} answered ${status}: ${reason}`)
}

function unreachable(target: ApiTarget, err: unknown, timeoutMs: number): UnavailableError {
  const hint =
    target.urlSource === 'stack'
      ? 'is `nodeplane up` still running for this data directory?'
      : 'check that the API is running and the URL is right (--api-url, NODEPLANE_API_URL, `nodeplane login`)'
  const name = (err as Error | undefined)?.name
  if (name === 'TimeoutError' || name === 'AbortError') {
    return new UnavailableError(`no answer from the API at ${target.url} within ${Math.round(timeoutMs / 1000)} s`, hint)
  }
  const cause = (err as { cause?: { code?: string; message?: string } } | undefined)?.cause
  const why = cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err))
  return new UnavailableError(`cannot reach the API at ${target.url}: ${why}`, hint)
}

/** Retry-After is seconds or an HTTP date. */
export function retryAfterSeconds(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (!value) return undefined
  if (/^\d+$/.test(value.trim())) return Number(value.trim())
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000))
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, 500)
}
