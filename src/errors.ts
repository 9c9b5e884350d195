/**
 * Typed domain errors. Domain code throws these; the HTTP layer maps `status` to the response
 * and the CLI maps them to a one-line reason and an exit code. `details` is text a person can
 * act on and must never carry secrets.
 */
export abstract class DomainError extends Error {
  abstract readonly status: number
  abstract readonly code: string
  constructor(
    message: string,
    readonly details: string = message,
  ) {
    super(message)
    this.name = new.target.name
  }
}

export class ValidationError extends DomainError {
  readonly status = 400
  readonly code = 'validation_error'
}

export class UnauthorizedError extends DomainError {
  readonly status = 401
  readonly code = 'unauthorized'
}

export class ForbiddenError extends DomainError {
  readonly status = 403
  readonly code = 'forbidden'
}

export class NotFoundError extends DomainError {
  readonly status = 404
  readonly code = 'not_found'
}

export class ConflictError extends DomainError {
  readonly status = 409
  readonly code = 'conflict'
}

export class PayloadTooLargeError extends DomainError {
  readonly status = 413
  readonly code = 'payload_too_large'
}

export class RateLimitedError extends DomainError {
  readonly status = 429
  readonly code = 'rate_limited'
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
    details?: string,
  ) {
    super(message, details)
  }
}

/** A dependency (database, bus) is unreachable; the caller may retry later. */
export class UnavailableError extends DomainError {
  readonly status = 503
  readonly code = 'unavailable'
}

/** Configuration is invalid; the process cannot start. */
export class ConfigError extends DomainError {
  readonly status = 500
  readonly code = 'invalid_configuration'
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration: ${problems.join('; ')}`)
  }
}

export function isDomainError(err: unknown): err is DomainError {
  return err instanceof DomainError
}
