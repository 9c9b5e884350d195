import path from 'node:path'
import { ConfigError } from '../errors.js'

export type DatabaseTarget =
  | { client: 'sqlite'; filename: string }
  | { client: 'postgres'; connectionString: string }

/**
 * `sqlite:///abs/file.db` (or `sqlite://relative/file.db`, resolved against the working
 * directory) or `postgres://…` / `postgresql://…`.
 */
export function parseDatabaseUrl(url: string, variable = 'DATABASE_URL'): DatabaseTarget {
  if (url.startsWith('sqlite://')) {
    const file = url.slice('sqlite://'.length)
    if (file.length === 0 || file === '/') {
      throw new ConfigError([`${variable}: a sqlite URL needs a file path, e.g. sqlite:///var/lib/nodeplane/cp.db`])
    }
    return { client: 'sqlite', filename: path.resolve(file) }
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    try {
      new URL(url)
    } catch {
      throw new ConfigError([`${variable}: not a valid postgres URL`])
    }
    return { client: 'postgres', connectionString: url }
  }
  throw new ConfigError([`${variable}: must start with sqlite:// or postgres://`])
}

/** The URL with any password replaced, safe for logs and `db status`. */
export function redactDatabaseUrl(url: string): string {
  if (!url.startsWith('postgres')) return url
  try {
    const u = new URL(url)
    if (u.password) u.password = '***'
    return u.toString()
  } catch {
    return 'postgres://<unparseable>'
  }
}
