/**
 * Errors only the HTTP layer raises (the domain never knows about methods or media types),
 * plus the one error body every failure answers with (spec, Errors): `{ error, details }`.
 */
import { DomainError } from '../errors.js'
import { z } from './zod.js'

export const errorBodySchema = z
  .object({
    error: z.string().openapi({ description: 'Short message', example: 'invalid request' }),
    details: z.string().openapi({ description: 'What went wrong, for a person', example: 'query.limit: Number must be less than or equal to 200' }),
  })
  .openapi('Error')

export type ErrorBody = z.infer<typeof errorBodySchema>

/** A DomainError that also sets response headers (Allow, Retry-After...). */
export abstract class HttpError extends DomainError {
  readonly headers: Readonly<Record<string, string>> = {}
}

export class MethodNotAllowedError extends HttpError {
  readonly status = 405
  readonly code = 'method_not_allowed'
  override readonly headers: Readonly<Record<string, string>>
  constructor(method: string, path: string, allowed: string) {
    super('method not allowed', `${method} is not allowed on ${path}; allowed: ${allowed}`)
    this.headers = { Allow: allowed }
  }
}

export class UnsupportedMediaTypeError extends HttpError {
  readonly status = 415
  readonly code = 'unsupported_media_type'
}

export class NotImplementedError extends HttpError {
  readonly status = 501
  readonly code = 'not_implemented'
}

/** A 4xx raised through Koa's `ctx.throw` (or http-errors) rather than a DomainError. */
export class ClientHttpError extends HttpError {
  readonly code = 'client_error'
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}
