import { isConnectionFailure } from '../db/errors.js'
import { ConfigError, ConflictError, ForbiddenError, NotFoundError, UnauthorizedError, UnavailableError, ValidationError, isDomainError } from '../errors.js'
import { EXIT } from './exit-codes.js'
import { usageMessage } from './usage-errors.js'

export interface CliFailure {
  name: string
  message: string
  details?: string
  exitCode: number
}

/** Turns any error into one actionable line and the documented exit code. */
export function describeFailure(err: unknown): CliFailure {
  const oclifExit = (err as { oclif?: { exit?: number } } | null)?.oclif?.exit
  if (err instanceof ConfigError) {
    return {
      name: 'ConfigError',
      message: `invalid configuration: ${err.problems.join('; ')}`,
      details: 'fix the variables named above (docs/configuration.md lists every one)',
      exitCode: EXIT.config,
    }
  }
  if (err instanceof UnavailableError) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.unavailable }
  if (err instanceof NotFoundError) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.notFound }
  if (err instanceof ConflictError) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.conflict }
  if (err instanceof ValidationError) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.usage }
  // A script can tell "your key was refused" from "the operation failed".
  if (err instanceof UnauthorizedError || err instanceof ForbiddenError) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.refused }
  if (isDomainError(err)) return { name: err.name, message: err.message, details: err.details, exitCode: EXIT.failure }
  if (isConnectionFailure(err)) {
    return {
      name: 'UnavailableError',
      message: `cannot reach the database: ${(err as Error).message}`,
      details: 'check DATABASE_URL / PAYMENTS_DATABASE_URL and that the server is running',
      exitCode: EXIT.unavailable,
    }
  }
  const message = err instanceof Error ? err.message : String(err)
  if (typeof oclifExit === 'number') return { name: 'UsageError', message: usageMessage(message), exitCode: oclifExit }
  return { name: err instanceof Error ? err.name : 'Error', message, exitCode: EXIT.failure }
}
