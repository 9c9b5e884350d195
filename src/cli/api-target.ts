/**
 * Which API a command talks to, and with which credential (docs/cli.md, "Credentials").
 *
 * URL, first found wins: `--api-url`, `NODEPLANE_API_URL`, the stored login (the context of
 * `--context` / `NODEPLANE_CONTEXT`, else the current one), the `api_url` of
 * a `nodeplane up` running for the current data dir.
 *
 * Key, first found wins: the command's own key (`nodeplane login --api-key / --with-key-stdin`),
 * `NODEPLANE_API_KEY`, the stored login's key, the local stack's admin key. The last two are
 * implicit, so each is used only for the URL it belongs to: pointing a command at another API
 * never sends it the key of your login or of your laptop's stack.
 */
import type { Env } from '../config/env.js'
import { ConfigError, UnauthorizedError, ValidationError } from '../errors.js'
import { CredentialsFileError, readCredentials, requestedContext, UnknownContextError } from './credentials.js'
import { currentDataDir, readLocalStack } from './local-stack.js'

export type UrlSource = 'flag' | 'env' | 'login' | 'stack'
export type KeySource = 'flag' | 'stdin' | 'prompt' | 'env' | 'login' | 'stack'

export interface ApiCredential {
  key: string
  source: KeySource
  /** The stored login's context, when the key is one. */
  context?: string
}

export interface ApiTarget {
  /** Base URL without a trailing slash and without `/api/v1`. */
  url: string
  urlSource: UrlSource
  credential?: ApiCredential
}

export interface ResolveTargetOptions {
  env: Env
  /** `--api-url`. */
  apiUrl?: string
  /** A key the command itself was given (login). */
  apiKey?: ApiCredential
  /** Throw when no credential is found (every command but login). */
  requireKey?: boolean
  /** Ignore a stored login that cannot be read (login, which is about to replace it). */
  tolerateBadLogin?: boolean
}

export function resolveApiTarget(options: ResolveTargetOptions): ApiTarget {
  const { env } = options
  // Read only when needed: a script with NODEPLANE_API_URL and NODEPLANE_API_KEY set does not
  // depend on (or fail over) a stored login it does not use.
  const login = once(() => {
    try {
      return readCredentials(env)
    } catch (err) {
      if (options.tolerateBadLogin && (err instanceof CredentialsFileError || err instanceof UnknownContextError)) return undefined
      throw err
    }
  })
  // A context asked for by name must exist, whichever URL and key win: a typo in --context must
  // not quietly send the command elsewhere.
  if (requestedContext(env) !== undefined) login()
  const stack = once(() => readLocalStack(env))

  const [raw, urlSource] = ((): [string, UrlSource] => {
    if (options.apiUrl) return [options.apiUrl, 'flag']
    if (env.NODEPLANE_API_URL) return [env.NODEPLANE_API_URL, 'env']
    const stored = login()
    if (stored) return [stored.api_url, 'login']
    const local = stack()
    if (local) return [local.apiUrl, 'stack']
    throw new ConfigError([
      `NODEPLANE_API_URL: not set, no stored login, and no \`nodeplane up\` running for ${currentDataDir(env)}; use --api-url, \`nodeplane login\`, or start \`nodeplane up\``,
    ])
  })()
  const url = normalizeApiUrl(raw, urlSource)

  let credential: ApiCredential | undefined = options.apiKey
  if (!credential && env.NODEPLANE_API_KEY) credential = { key: env.NODEPLANE_API_KEY.trim(), source: 'env' }
  const stored = credential ? undefined : login()
  if (!credential && stored && sameApi(stored.api_url, url)) credential = { key: stored.api_key, source: 'login', context: stored.context }
  const local = credential ? undefined : stack()
  if (!credential && local && sameApi(local.apiUrl, url)) {
    const key = local.adminKey()
    if (key) credential = { key, source: 'stack' }
  }
  if (!credential && options.requireKey) {
    throw new UnauthorizedError(
      `no credentials for ${url}`,
      'run `nodeplane login` (reads the API key from stdin with --with-key-stdin), or set NODEPLANE_API_KEY',
    )
  }
  return { url, urlSource, ...(credential ? { credential } : {}) }
}

const SOURCE_NAME: Record<UrlSource, string> = {
  flag: '--api-url',
  env: 'NODEPLANE_API_URL',
  login: 'the stored login',
  stack: 'stack.json',
}

/** `https://api.example.com/`, `…/api/v1` -> `https://api.example.com`. */
export function normalizeApiUrl(raw: string, source: UrlSource): string {
  const problem = (why: string): Error => {
    const text = `${SOURCE_NAME[source]}: ${why}`
    if (source === 'env') return new ConfigError([`NODEPLANE_API_URL=${JSON.stringify(raw.slice(0, 120))}: ${why}`])
    if (source === 'login') return new CredentialsFileError(text, 'run `nodeplane login --api-url URL` again')
    return new ValidationError(`${text} (got ${JSON.stringify(raw.slice(0, 120))})`, 'give the API base URL, e.g. https://api.example.com')
  }
  let parsed: URL
  try {
    parsed = new URL(raw.trim())
  } catch {
    throw problem('is not a URL')
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw problem('must be an http:// or https:// URL')
  if (parsed.username || parsed.password) throw problem('must not carry credentials (use `nodeplane login`)')
  const base = parsed.pathname.replace(/\/+$/, '').replace(/\/api\/v1$/, '')
  return `${parsed.origin}${base}`
}

function sameApi(a: string, b: string): boolean {
  try {
    return normalizeApiUrl(a, 'flag') === normalizeApiUrl(b, 'flag')
  } catch {
    return false
  }
}

function once<T>(compute: () => T): () => T {
  let done = false
  let value: T
  return () => {
    if (!done) {
      value = compute()
      done = true
    }
    return value
  }
}
