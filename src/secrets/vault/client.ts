/**
 * A Vault client for one process: AppRole login, token renewal, KV v2 reads and transit
 * encrypt/decrypt (docs/secrets.md, "HashiCorp Vault").
 *
 * The token lives in memory only. One cycle:
 * 1. Log in (`POST auth/<mount>/login` with role_id and secret_id): a token with a lease.
 * 2. At RENEW_FRACTION of the lease, `POST auth/token/renew-self`; the new lease schedules the
 *    next renewal. A refused renewal (the token reached its max TTL, or was revoked) logs in again.
 * 3. A call answered 403 (the token expired or was revoked between renewals) logs in again and
 *    is repeated once, so callers never see an expired token.
 * 4. Vault unreachable, or the login refused (the role or secret id revoked): the client is
 *    `down` (readiness reports it, calls fail at once with the reason) and tries to log in again
 *    after a backoff that doubles from retryMinMs to retryMaxMs, until it succeeds.
 * 5. `close()` revokes the token (`auth/token/revoke-self`, best effort): at a daemon's shutdown,
 *    or right after start for a process that only reads references.
 * Nothing here keeps the process alive (timers are unref'd) or logs a token, id or secret.
 */
import type { Logger } from '../../log.js'
import { vaultErrors, vaultRequest, VaultUnreachableError, type VaultConnection, type VaultResponse } from './http.js'

export { VaultCertificateError, VaultUnreachableError } from './http.js'

/** The most a shutdown waits for Vault to revoke the token. */
export const REVOKE_TIMEOUT_MS = 2000

/** Renew when this much of the lease has passed: time to retry a failed renewal before expiry. */
export const RENEW_FRACTION = 2 / 3

export interface VaultClientOptions extends VaultConnection {
  roleId: string
  secretId: string
  /** Where the AppRole auth method is mounted (VAULT_APPROLE_MOUNT, default `approle`). */
  approleMount: string
  retryMinMs: number
  retryMaxMs: number
  logger: Logger
}

/** Vault refused the AppRole login: a wrong or revoked role_id or secret_id. */
export class VaultRefusedError extends Error {
  constructor(readonly address: string, reason: string) {
    super(`Vault at ${address} refused the AppRole login (${reason}): check VAULT_ROLE_ID and VAULT_SECRET_ID, and that the role exists`)
    this.name = 'VaultRefusedError'
  }
}

/** Vault answered a request with an error (a missing secret, a path the policy does not grant). */
export class VaultRequestError extends Error {
  constructor(readonly status: number, readonly apiPath: string, reason: string) {
    super(`Vault refused ${apiPath} (${status}: ${reason})`)
    this.name = 'VaultRequestError'
  }
}

export type TransitRewrapResult = { ciphertext: string; version: number } | { error: string }

/** The key version a transit ciphertext names (`vault:v<n>:…`), 0 when it names none. */
export function ciphertextVersion(ciphertext: string): number {
  const match = /^vault:v(\d+):/.exec(ciphertext)
  return match ? Number(match[1]) : 0
}

export type VaultHealth = { ok: true } | { ok: false; error: string }

interface Login {
  token: string
  leaseSeconds: number
  renewable: boolean
}

export class VaultClient {
  #login: Login | undefined
  #loggingIn: Promise<Login> | undefined
  #timer: NodeJS.Timeout | undefined
  #health: VaultHealth = { ok: true }
  #backoffMs: number
  #closed = false

  private constructor(readonly options: VaultClientOptions) {
    this.#backoffMs = options.retryMinMs
  }

  get address(): string {
    return this.options.address
  }

  /** Logs in once; throws VaultUnreachableError or VaultRefusedError when that fails (the caller exits 78). */
  static async connect(options: VaultClientOptions): Promise<VaultClient> {
    const client = new VaultClient(options)
    await client.#relogin()
    return client
  }

  health(): VaultHealth {
    return this.#health
  }

  /**
   * For /readyz: down while the client is down; otherwise asks `sys/health` (no token needed),
   * so a Vault that went away is noticed before the next call or renewal needs it.
   */
  async check(): Promise<VaultHealth> {
    if (!this.#health.ok) return this.#health
    try {
      const { status } = await vaultRequest(this.options, 'GET', 'sys/health?standbyok=true&perfstandbyok=true')
      // 200 active, 429/473 standby; 503 sealed, 501 not initialised.
      if (status === 503 || status === 501) this.#failed(new VaultUnreachableError(this.address, status === 503 ? 'Vault is sealed' : 'Vault is not initialised'))
    } catch (err) {
      this.#failed(err)
    }
    return this.#health
  }

  /** KV version 2: the fields of the secret at `<mount>/data/<path>`. */
  async readKv(mount: string, secretPath: string): Promise<Record<string, unknown>> {
    const apiPath = `${mount}/data/${secretPath}`
    const { status, body } = await this.#call('GET', apiPath)
    if (status !== 200) throw new VaultRequestError(status, apiPath, status === 404 ? 'no such secret' : vaultErrors(body))
    const data = (body.data as { data?: unknown } | undefined)?.data
    if (!data || typeof data !== 'object') throw new VaultRequestError(status, apiPath, 'the answer holds no data (a deleted version?)')
    return data as Record<string, unknown>
  }

  /** Transit: Vault's `vault:v<n>:…` ciphertext of `plaintext` under the named key. */
  async transitEncrypt(mount: string, key: string, plaintext: Uint8Array): Promise<string> {
    const apiPath = `${mount}/encrypt/${encodeURIComponent(key)}`
    const { status, body } = await this.#call('POST', apiPath, { plaintext: Buffer.from(plaintext).toString('base64') })
    const ciphertext = (body.data as { ciphertext?: unknown } | undefined)?.ciphertext
    if (status !== 200 || typeof ciphertext !== 'string') throw new VaultRequestError(status, apiPath, vaultErrors(body))
    return ciphertext
  }

  /** Transit decrypt; VaultRequestError (400) when the ciphertext is not the key's. */
  async transitDecrypt(mount: string, key: string, ciphertext: string): Promise<Uint8Array> {
    const apiPath = `${mount}/decrypt/${encodeURIComponent(key)}`
    const { status, body } = await this.#call('POST', apiPath, { ciphertext })
    const plaintext = (body.data as { plaintext?: unknown } | undefined)?.plaintext
    if (status !== 200 || typeof plaintext !== 'string') throw new VaultRequestError(status, apiPath, vaultErrors(body))
    return new Uint8Array(Buffer.from(plaintext, 'base64'))
  }

  /**
   * Transit rewrap, batched: each ciphertext re-encrypted under the key's latest version inside
   * Vault (the plaintext never leaves it). One result per input, in order; an item Vault could not
   * rewrap (too old for min_decryption_version, altered) carries Vault's error instead.
   */
  async transitRewrap(mount: string, key: string, ciphertexts: readonly string[]): Promise<TransitRewrapResult[]> {
    const apiPath = `${mount}/rewrap/${encodeURIComponent(key)}`
    const { status, body } = await this.#call('POST', apiPath, { batch_input: ciphertexts.map((ciphertext) => ({ ciphertext })) })
    const results = (body.data as { batch_results?: unknown } | undefined)?.batch_results
    // Vault answers 400 with batch_results when every item failed; anything else without them is a refusal.
    if ((status !== 200 && status !== 400) || !Array.isArray(results) || results.length !== ciphertexts.length) throw new VaultRequestError(status, apiPath, vaultErrors(body))
    return results.map((item: unknown): TransitRewrapResult => {
      const { ciphertext, key_version: version, error } = (item ?? {}) as { ciphertext?: unknown; key_version?: unknown; error?: unknown }
      if (typeof ciphertext === 'string' && ciphertext.length > 0 && (typeof error !== 'string' || error === '')) {
        return { ciphertext, version: typeof version === 'number' ? version : ciphertextVersion(ciphertext) }
      }
      return { error: typeof error === 'string' && error !== '' ? error.slice(0, 200) : 'no ciphertext in the answer' }
    })
  }

  /**
   * Stops renewing and revokes the token (`auth/token/revoke-self`), so it does not outlive the
   * process for the rest of its lease. Best effort within REVOKE_TIMEOUT_MS: a Vault that is down
   * must not hold up a shutdown, and the token still expires with its lease.
   */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    clearTimeout(this.#timer)
    const login = this.#login
    this.#login = undefined
    if (!login) return
    const connection = { ...this.options, timeoutMs: Math.min(this.options.timeoutMs, REVOKE_TIMEOUT_MS) }
    try {
      const { status, body } = await vaultRequest(connection, 'POST', 'auth/token/revoke-self', { token: login.token, body: {} })
      if (status === 204 || status === 200) this.options.logger.info({ vault: this.address }, 'revoked the Vault token')
      else this.options.logger.warn({ vault: this.address, status, reason: vaultErrors(body) }, 'Vault did not revoke the token; it lapses with its lease')
    } catch (err) {
      this.options.logger.warn({ vault: this.address, err: { message: (err as Error).message } }, 'could not revoke the Vault token; it lapses with its lease')
    }
  }

  async #call(method: 'GET' | 'POST', apiPath: string, body?: unknown): Promise<VaultResponse> {
    if (this.#closed) throw new VaultUnreachableError(this.address, 'the client is closed')
    // While down, fail at once with the reason; the retry timer brings the client back.
    if (!this.#health.ok) throw this.#downError()
    try {
      const login = this.#login ?? (await this.#relogin())
      let response = await vaultRequest(this.options, method, apiPath, { token: login.token, ...(body === undefined ? {} : { body }) })
      if (response.status === 403) {
        // The token expired or was revoked between renewals: log in again and repeat once.
        const fresh = await this.#relogin(login)
        response = await vaultRequest(this.options, method, apiPath, { token: fresh.token, ...(body === undefined ? {} : { body }) })
      }
      if (response.status >= 500) throw new VaultUnreachableError(this.address, `${response.status}: ${vaultErrors(response.body)}`)
      return response
    } catch (err) {
      if (err instanceof VaultUnreachableError || err instanceof VaultRefusedError) this.#failed(err)
      throw err
    }
  }

  #downError(): Error {
    const error = this.#health.ok ? 'unknown' : this.#health.error
    return new VaultUnreachableError(this.address, `down since the last attempt (${error}); retrying in the background`)
  }

  /** One login at a time; `stale` is the login a 403 came back for (another caller may have replaced it already). */
  #relogin(stale?: Login): Promise<Login> {
    if (this.#login && this.#login !== stale) return Promise.resolve(this.#login)
    this.#login = undefined
    this.#loggingIn ??= this.#doLogin().finally(() => {
      this.#loggingIn = undefined
    })
    return this.#loggingIn
  }

  async #doLogin(): Promise<Login> {
    const apiPath = `auth/${this.options.approleMount}/login`
    const { status, body } = await vaultRequest(this.options, 'POST', apiPath, { body: { role_id: this.options.roleId, secret_id: this.options.secretId } })
    if (status >= 500) throw new VaultUnreachableError(this.address, `${status}: ${vaultErrors(body)}`)
    const auth = body.auth as { client_token?: unknown; lease_duration?: unknown; renewable?: unknown } | undefined
    if (status !== 200 || typeof auth?.client_token !== 'string') throw new VaultRefusedError(this.address, `${status}: ${vaultErrors(body)}`)
    const login: Login = { token: auth.client_token, leaseSeconds: typeof auth.lease_duration === 'number' ? auth.lease_duration : 0, renewable: auth.renewable === true }
    this.#login = login
    this.#recovered()
    this.#scheduleRenewal(login)
    this.options.logger.info({ vault: this.address, lease_seconds: login.leaseSeconds }, 'logged in to Vault')
    return login
  }

  #scheduleRenewal(login: Login): void {
    clearTimeout(this.#timer)
    if (this.#closed || login.leaseSeconds <= 0) return
    // A token that cannot be renewed is replaced by a new login at the same point of its lease.
    this.#timer = setTimeout(() => void this.#renew(login), Math.max(50, login.leaseSeconds * 1000 * RENEW_FRACTION))
    this.#timer.unref()
  }

  async #renew(login: Login): Promise<void> {
    if (this.#closed || this.#login !== login) return
    try {
      if (!login.renewable) {
        await this.#relogin(login)
        return
      }
      const { status, body } = await vaultRequest(this.options, 'POST', 'auth/token/renew-self', { token: login.token, body: {} })
      if (status >= 500) throw new VaultUnreachableError(this.address, `${status}: ${vaultErrors(body)}`)
      const auth = body.auth as { lease_duration?: unknown; renewable?: unknown } | undefined
      if (status === 200 && typeof auth?.lease_duration === 'number' && auth.lease_duration > 0) {
        login.leaseSeconds = auth.lease_duration
        login.renewable = auth.renewable === true
        this.#recovered()
        this.#scheduleRenewal(login)
        return
      }
      this.options.logger.info({ vault: this.address, status }, 'Vault refused to renew the token; logging in again')
      await this.#relogin(login)
    } catch (err) {
      this.#failed(err)
    }
  }

  #recovered(): void {
    if (!this.#health.ok) this.options.logger.info({ vault: this.address }, 'Vault is reachable again')
    this.#health = { ok: true }
    this.#backoffMs = this.options.retryMinMs
  }

  /** Down: say why once, then log in again after the backoff. */
  #failed(err: unknown): void {
    if (this.#closed) return
    const error = err instanceof Error ? err.message : String(err)
    if (this.#health.ok || this.#health.error !== error) {
      this.options.logger.error({ vault: this.address, retry_in_ms: this.#backoffMs, err: { message: error } }, 'Vault is unavailable; secrets it holds cannot be used until it is back')
    }
    this.#health = { ok: false, error }
    this.#login = undefined
    clearTimeout(this.#timer)
    const delay = this.#backoffMs
    this.#backoffMs = Math.min(this.options.retryMaxMs, this.#backoffMs * 2)
    this.#timer = setTimeout(() => {
      this.#relogin().catch((retryErr: unknown) => this.#failed(retryErr))
    }, delay)
    this.#timer.unref()
  }
}
