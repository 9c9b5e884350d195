/**
 * The stored login: `${XDG_CONFIG_HOME:-~/.config}/nodeplane/credentials.json`, holding
 * `{api_url, api_key}`. The directory is 0700 and the file 0600, like ssh keys; a file that
 * group or others can read (or that another user owns) is refused rather than used, because a
 * key that others could have copied must be treated as leaked.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Env } from '../config/env.js'
import { DomainError } from '../errors.js'

export interface StoredCredentials {
  api_url: string
  api_key: string
}

/** The stored login cannot be used as it is; exit 1 with what to do. */
export class CredentialsFileError extends DomainError {
  readonly status = 500
  readonly code = 'credentials_file'
}

export function credentialsDir(env: Env = process.env): string {
  const xdg = env.XDG_CONFIG_HOME
  // XDG: a relative XDG_CONFIG_HOME is invalid and must be ignored.
  const base = xdg && path.isAbsolute(xdg) ? xdg : path.join(env.HOME || os.homedir(), '.config')
  return path.join(base, 'nodeplane')
}

export function credentialsPath(env: Env = process.env): string {
  return path.join(credentialsDir(env), 'credentials.json')
}

/** The stored login, or undefined when there is none. Throws when the file is unsafe or unreadable. */
export function readCredentials(env: Env = process.env): StoredCredentials | undefined {
  const file = credentialsPath(env)
  let stat: fs.Stats
  try {
    stat = fs.statSync(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  assertPrivate(file, stat)
  let parsed: unknown
  try {
    parsed = JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    throw new CredentialsFileError(`${file} is not valid JSON`, 'run `nodeplane login` again to rewrite it')
  }
  const { api_url: apiUrl, api_key: apiKey } = (parsed ?? {}) as Partial<Record<keyof StoredCredentials, unknown>>
  if (typeof apiUrl !== 'string' || typeof apiKey !== 'string' || apiUrl.length === 0 || apiKey.length === 0) {
    throw new CredentialsFileError(`${file} lacks api_url or api_key`, 'run `nodeplane login` again to rewrite it')
  }
  return { api_url: apiUrl, api_key: apiKey }
}

/** Refuses a file that group or others may read or write, or that another user owns. */
export function assertPrivate(file: string, stat: fs.Stats): void {
  const mode = stat.mode & 0o777
  if ((mode & 0o077) !== 0) {
    throw new CredentialsFileError(
      `refusing to use ${file}: its mode is ${mode.toString(8).padStart(4, '0')}, so other users may read the key`,
      `run \`chmod 600 ${file}\` (and consider the key leaked: rotate it), or \`nodeplane login\` again`,
    )
  }
  const uid = process.getuid?.()
  if (uid !== undefined && stat.uid !== uid) {
    throw new CredentialsFileError(`refusing to use ${file}: it belongs to another user (uid ${stat.uid})`, 'remove it and run `nodeplane login`')
  }
}

/** Writes the login atomically: the file exists only ever with mode 0600, in a 0700 directory. */
export function writeCredentials(credentials: StoredCredentials, env: Env = process.env): string {
  const dir = credentialsDir(env)
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  // mkdir leaves an existing directory as it was; this one is ours and holds secrets.
  fs.chmodSync(dir, 0o700)
  const file = credentialsPath(env)
  const tmp = `${file}.${process.pid}.tmp`
  fs.rmSync(tmp, { force: true })
  fs.writeFileSync(tmp, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600, flag: 'wx' })
  fs.renameSync(tmp, file)
  return file
}

/** Removes the stored login; true when there was one. */
export function removeCredentials(env: Env = process.env): boolean {
  const file = credentialsPath(env)
  const existed = fs.existsSync(file)
  fs.rmSync(file, { force: true })
  return existed
}
