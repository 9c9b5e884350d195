/** Driver errors recognised the same way on both dialects. */

function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : undefined
}

export function isUniqueViolation(err: unknown): boolean {
  const code = codeOf(err)
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
}

/**
 * Another writer got there first: Postgres serialization failure / deadlock, or SQLite's
 * busy errors (a WAL read snapshot that can no longer be upgraded to a write, or a lock held
 * by another process past busy_timeout).
 */
export function isConcurrentWriteFailure(err: unknown): boolean {
  const code = codeOf(err)
  return code === '40001' || code === '40P01' || (code !== undefined && code.startsWith('SQLITE_BUSY'))
}

/** The database cannot be reached at all (wrong host/port, refused, missing file or dir). */
export function isConnectionFailure(err: unknown): boolean {
  const code = codeOf(err)
  if (code && ['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'ECONNRESET', 'SQLITE_CANTOPEN', '28P01', '3D000', '57P03'].includes(code)) {
    return true
  }
  const message = String((err as { message?: unknown } | null)?.message ?? '')
  return /Knex: Timeout acquiring a connection|unable to open database|Connection terminated/i.test(message)
}

/**
 * The database is away for now: unreachable, restarting, or it dropped the connection under a
 * query (Postgres admin or crash shutdown, `57P01`/`57P02`, connection exceptions `08xxx`). An API
 * request failing so is worth retrying shortly: 503 with Retry-After, not 500.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (isConnectionFailure(err)) return true
  const code = codeOf(err)
  if (code && (code === '57P01' || code === '57P02' || code.startsWith('08'))) return true
  const message = String((err as { message?: unknown } | null)?.message ?? '')
  return /Connection ended unexpectedly|terminating connection|is not queryable|the database system is (starting up|shutting down|in recovery mode)/i.test(message)
}
