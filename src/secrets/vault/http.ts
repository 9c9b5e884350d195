/**
 * One request to Vault's HTTP API (https://developer.hashicorp.com/vault/api-docs) over
 * node:http / node:https, so a private CA (VAULT_CACERT) can be trusted without a new package.
 * Vault answers JSON, and errors as `{"errors": ["…"]}`; this returns the status and the parsed
 * body and leaves the meaning to the caller. A network failure or timeout throws
 * VaultUnreachableError. Nothing here logs: bodies carry tokens and secrets.
 */
import http from 'node:http'
import https from 'node:https'

export interface VaultConnection {
  /** VAULT_ADDR, e.g. https://vault.internal:8200 */
  address: string
  /** PEM of the CA that signed Vault's certificate (VAULT_CACERT), trusted instead of the system's CAs. */
  caPem?: string | undefined
  /** Where caPem came from, for messages. */
  caFile?: string | undefined
  /** Vault Enterprise namespace (X-Vault-Namespace), when set. */
  namespace?: string | undefined
  timeoutMs: number
}

export interface VaultResponse {
  status: number
  body: Record<string, unknown>
}

/** Vault could not be reached (refused, reset, timed out, DNS): worth retrying later. */
export class VaultUnreachableError extends Error {
  constructor(readonly address: string, reason: string) {
    super(`Vault at ${address} is unreachable: ${reason}`)
    this.name = 'VaultUnreachableError'
  }
}

/** Vault's certificate is not trusted (another CA, expired, not for this name): a configuration problem. */
export class VaultCertificateError extends VaultUnreachableError {
  constructor(address: string, caFile: string | undefined, reason: string) {
    super(address, `its certificate is not trusted (${reason}): ${caFile ? `VAULT_CACERT=${caFile} is not the CA that signed it` : 'set VAULT_CACERT to the PEM of the CA that signed it'}`)
    this.name = 'VaultCertificateError'
  }
}

/** OpenSSL's verification failures as Node reports them (err.code). */
const CERTIFICATE_ERRORS = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'INVALID_CA',
  'ERR_TLS_CERT_ALTNAME_INVALID',
])

const MAX_RESPONSE_BYTES = 1024 * 1024

export function vaultRequest(
  connection: VaultConnection,
  method: 'GET' | 'POST',
  apiPath: string,
  options: { token?: string | undefined; body?: unknown } = {},
): Promise<VaultResponse> {
  const url = new URL(`/v1/${apiPath.replace(/^\/+/, '')}`, connection.address)
  const payload = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body), 'utf8')
  const headers: Record<string, string> = { accept: 'application/json' }
  if (payload) {
    headers['content-type'] = 'application/json'
    headers['content-length'] = String(payload.length)
  }
  if (options.token) headers['x-vault-token'] = options.token
  if (connection.namespace) headers['x-vault-namespace'] = connection.namespace
  const transport = url.protocol === 'https:' ? https : http
  return new Promise<VaultResponse>((resolve, reject) => {
    const request = transport.request(
      url,
      { method, headers, timeout: connection.timeoutMs, ...(url.protocol === 'https:' && connection.caPem ? { ca: connection.caPem } : {}) },
      (response) => {
        const chunks: Buffer[] = []
        let size = 0
        response.on('data', (chunk: Buffer) => {
          size += chunk.length
          if (size > MAX_RESPONSE_BYTES) {
            response.destroy()
            reject(new VaultUnreachableError(connection.address, 'answer larger than 1 MiB'))
            return
          }
          chunks.push(chunk)
        })
        response.on('error', (err) => reject(new VaultUnreachableError(connection.address, describe(err))))
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let body: Record<string, unknown> = {}
          if (text.trim().length > 0) {
            try {
              const parsed: unknown = JSON.parse(text)
              if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) body = parsed as Record<string, unknown>
            } catch {
              // A proxy's HTML error page: the status still says what happened.
            }
          }
          resolve({ status: response.statusCode ?? 0, body })
        })
      },
    )
    request.on('timeout', () => request.destroy(new Error(`no answer within ${connection.timeoutMs} ms`)))
    request.on('error', (err) => {
      const code = (err as NodeJS.ErrnoException).code
      reject(code && CERTIFICATE_ERRORS.has(code) ? new VaultCertificateError(connection.address, connection.caFile, describe(err)) : new VaultUnreachableError(connection.address, describe(err)))
    })
    request.end(payload)
  })
}

/** Vault's own error strings (`errors`), joined; they name paths and reasons, never secret values. */
export function vaultErrors(body: Record<string, unknown>): string {
  const errors = Array.isArray(body.errors) ? body.errors.filter((e): e is string => typeof e === 'string') : []
  const text = errors.join('; ').replace(/\s+/g, ' ').trim()
  return text.length > 200 ? `${text.slice(0, 197)}...` : text || 'no reason given'
}

function describe(err: Error): string {
  return (err.message || (err as NodeJS.ErrnoException).code || err.name).slice(0, 200)
}
