/**
 * Stored logins: `${XDG_CONFIG_HOME:-~/.config}/nodeplane/credentials.json`, one named context
 * per API (like kubectl contexts or gh hosts):
 *
 *   {"current_context": "prod", "contexts": {"prod": {"api_url", "api_key"}, "staging": {…}}}
 *
 * The context in use is `--context` / `NODEPLANE_CONTEXT`, else `current_context`. A file of the
 * single-login shape `{api_url, api_key}` (before contexts) reads as the context `default`, and
 * is rewritten in the new shape by the next login, `context use` or `context remove`.
 *
 * The directory is 0700 and the file 0600, like ssh keys; a file that group or others can read
 * (or that another user owns) is refused rather than used, because a key that others could have
 * copied must be treated as leaked.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Env } from '../config/env.js'
import { DomainError, NotFoundError, ValidationError } from '../errors.js'

export interface StoredCredentials {
  api_url: string
  api_key: string
}

/** The selected context's login, with its name. */
export interface SelectedLogin extends StoredCredentials {
  context: string
}

export interface CredentialsFile {
  current_context: string | null
  contexts: Record<string, StoredCredentials>
}

export const DEFAULT_CONTEXT = 'default'
const CONTEXT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/

/** The stored login cannot be used as it is; exit 1 with what to do. */
export class CredentialsFileError extends DomainError {
  readonly status = 500
  readonly code = 'credentials_file'
}

/** `--context` / `NODEPLANE_CONTEXT` names a context the file does not have (exit 3). */
export class UnknownContextError extends NotFoundError {}

export function credentialsDir(env: Env = process.env): string {
  const xdg = env.XDG_CONFIG_HOME
  // XDG: a relative XDG_CONFIG_HOME is invalid and must be ignored.
  const base = xdg && path.isAbsolute(xdg) ? xdg : path.join(env.HOME || os.homedir(), '.config')
  return path.join(base, 'nodeplane')
}

export function credentialsPath(env: Env = process.env): string {
  return path.join(credentialsDir(env), 'credentials.json')
}

/** A context name as a person types it: letters, digits, `.`, `_`, `-`; exit 2 otherwise. */
export function assertContextName(name: string): string {
  if (!CONTEXT_NAME.test(name)) {
    throw new ValidationError(
      `invalid context name ${JSON.stringify(name.slice(0, 80))}`,
      'use letters, digits, ".", "_" and "-" (at most 63), starting with a letter or digit',
    )
  }
  return name
}

/** The context asked for by `--context` or NODEPLANE_CONTEXT, validated; undefined when neither. */
export function requestedContext(env: Env): string | undefined {
  const name = env.NODEPLANE_CONTEXT?.trim()
  return name ? assertContextName(name) : undefined
}

/** The file's current context, when there is a readable file that names one. */
export function currentContext(env: Env): string | undefined {
  try {
    return readCredentialsFile(env)?.current_context ?? undefined
  } catch (err) {
    if (err instanceof CredentialsFileError) return undefined
    throw err
  }
}

/** The whole file, or undefined when there is none. Throws when it is unsafe or unreadable. */
export function readCredentialsFile(env: Env = process.env): CredentialsFile | undefined {
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
  const rewrite = 'run `nodeplane login` again to rewrite it'
  const record = (parsed ?? {}) as Record<string, unknown>
  if (!('contexts' in record)) {
    // The single-login file from before contexts.
    return { current_context: DEFAULT_CONTEXT, contexts: { [DEFAULT_CONTEXT]: loginOf(record, `${file} lacks api_url or api_key`, rewrite) } }
  }
  const { contexts, current_context: current } = record
  if (typeof contexts !== 'object' || contexts === null || Array.isArray(contexts) || (current !== null && current !== undefined && typeof current !== 'string')) {
    throw new CredentialsFileError(`${file}: "contexts" must be an object of {api_url, api_key} and "current_context" a name`, rewrite)
  }
  const result: CredentialsFile = { current_context: typeof current === 'string' ? current : null, contexts: {} }
  for (const [name, login] of Object.entries(contexts as Record<string, unknown>)) {
    result.contexts[name] = loginOf((login ?? {}) as Record<string, unknown>, `${file}: context "${name}" lacks api_url or api_key`, `run \`nodeplane login --context ${name}\` again`)
  }
  return result
}

function loginOf(record: Record<string, unknown>, problem: string, fix: string): StoredCredentials {
  const { api_url: apiUrl, api_key: apiKey } = record
  if (typeof apiUrl !== 'string' || typeof apiKey !== 'string' || apiUrl.length === 0 || apiKey.length === 0) throw new CredentialsFileError(problem, fix)
  return { api_url: apiUrl, api_key: apiKey }
}

/**
 * The login of the context in use: `--context` / NODEPLANE_CONTEXT, else the current one.
 * Undefined when there is no file or no current context; a named context that does not exist
 * throws (a typo must not silently fall back to another API).
 */
export function readCredentials(env: Env = process.env): SelectedLogin | undefined {
  const requested = requestedContext(env)
  const file = readCredentialsFile(env)
  const name = requested ?? file?.current_context ?? undefined
  if (name === undefined) return undefined
  const login = file && Object.hasOwn(file.contexts, name) ? file.contexts[name] : undefined
  if (!login) {
    if (requested === undefined) {
      throw new CredentialsFileError(`${credentialsPath(env)}: the current context "${name}" does not exist`, 'pick one with `nodeplane context use NAME` (`nodeplane context list`)')
    }
    throw new UnknownContextError(`no context "${name}" in ${credentialsPath(env)}`, `log in to it with \`nodeplane login --context ${name} --api-url URL\`, or see \`nodeplane context list\``)
  }
  return { ...login, context: name }
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

/** Writes the file atomically: it exists only ever with mode 0600, in a 0700 directory. */
export function writeCredentialsFile(credentials: CredentialsFile, env: Env = process.env): string {
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

/**
 * Stores a login as the context `name`, replacing that context's. It becomes the current context
 * only when there is none yet: logging in to prod must not silently turn every later command
 * towards prod (`nodeplane context use` does that on purpose).
 */
export function writeCredentials(credentials: StoredCredentials, env: Env = process.env, name: string = requestedContext(env) ?? DEFAULT_CONTEXT): { file: string; context: string; current: string } {
  assertContextName(name)
  let stored: CredentialsFile = { current_context: null, contexts: {} }
  try {
    stored = readCredentialsFile(env) ?? stored
  } catch (err) {
    // An unreadable or unsafe file is replaced, as the error told the user to do by logging in again.
    if (!(err instanceof CredentialsFileError)) throw err
  }
  stored.contexts[name] = credentials
  if (stored.current_context === null || !Object.hasOwn(stored.contexts, stored.current_context)) stored.current_context = name
  return { file: writeCredentialsFile(stored, env), context: name, current: stored.current_context }
}

/** Makes `name` the current context; exit 3 when there is no such context. */
export function useContext(name: string, env: Env = process.env): { file: string; login: SelectedLogin } {
  const stored = readCredentialsFile(env)
  const login = stored && Object.hasOwn(stored.contexts, assertContextName(name)) ? stored.contexts[name] : undefined
  if (!stored || !login) throw new UnknownContextError(`no context "${name}" in ${credentialsPath(env)}`, 'see `nodeplane context list`, or log in to it with `nodeplane login --context NAME --api-url URL`')
  stored.current_context = name
  return { file: writeCredentialsFile(stored, env), login: { ...login, context: name } }
}

/**
 * Forgets the context `name` (default: the one in use). When it was the current one, no context is
 * current afterwards; the last one gone, the file goes too. False when there was nothing to remove.
 */
export function removeCredentials(env: Env = process.env, name?: string): { removed: boolean; context: string | null } {
  const stored = readCredentialsFile(env)
  const target = name === undefined ? (requestedContext(env) ?? stored?.current_context ?? null) : assertContextName(name)
  if (!stored || target === null || !Object.hasOwn(stored.contexts, target)) return { removed: false, context: target }
  delete stored.contexts[target]
  if (stored.current_context === target) stored.current_context = null
  if (Object.keys(stored.contexts).length === 0) fs.rmSync(credentialsPath(env), { force: true })
  else writeCredentialsFile(stored, env)
  return { removed: true, context: target }
}
