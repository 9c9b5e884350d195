/**
 * A local fake of HashiCorp Vault for tests only: a real HTTP server speaking the documented
 * endpoints nodeplane uses (https://developer.hashicorp.com/vault/api-docs):
 * - POST /v1/auth/<approle mount>/login {role_id, secret_id} -> {auth: {client_token, lease_duration, renewable}}
 * - POST /v1/auth/token/renew-self (X-Vault-Token) -> {auth: {client_token, lease_duration, renewable}}
 * - POST /v1/auth/token/revoke-self (X-Vault-Token) -> 204
 * - GET  /v1/<mount>/data/<path> -> {data: {data: {...}, metadata: {version}}}  (KV version 2)
 * - POST /v1/transit/encrypt/<key> {plaintext} -> {data: {ciphertext: "vault:v<latest>:…", key_version}}
 * - POST /v1/transit/decrypt/<key> {ciphertext} -> {data: {plaintext}}; a version below the key's
 *   min_decryption_version is refused (400), as Vault does
 * - POST /v1/transit/rewrap/<key> {ciphertext} or {batch_input: [{ciphertext}]} -> the same data
 *   under the latest version ({data: {ciphertext, key_version}} or {data: {batch_results: [...]}},
 *   a failed item carrying `error`)
 * - GET  /v1/sys/health -> 200
 * Errors are Vault's: a status and {"errors": [...]}; a missing or expired token is 403
 * "permission denied". Controls: expire every token, revoke and restore the role, go unreachable
 * (the port closes, connections reset) and come back on the same port, rotate a transit key and
 * raise its min_decryption_version. With `tls`, it serves HTTPS with a certificate for 127.0.0.1
 * and localhost signed by a CA of its own (`caPem`), as a production Vault behind a private CA.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo, Socket } from 'node:net'
import { createCertificateAuthority, issueCertificate, LOCAL_HOSTS } from '../../src/tls/dev-pki.js'

export interface FakeVaultOptions {
  /** Lease of a login token, seconds (Vault's token_ttl). */
  tokenTtlSeconds?: number
  /** Transit keys that exist. */
  transitKeys?: string[]
  approleMount?: string
  /** Serve HTTPS with a certificate from a test CA of its own (`caPem`). */
  tls?: boolean
}

export interface FakeVault {
  url: string
  /** With `tls`: the PEM of the CA that signed the server's certificate. */
  caPem: string | undefined
  roleId: string
  secretId: string
  /** Sets a KV v2 secret at `<mount>/<path>`. */
  setSecret(mountAndPath: string, data: Record<string, string>): void
  /** Every token stops working now (as if its TTL ran out). */
  expireTokens(): void
  revokeRole(): void
  restoreRole(): void
  goUnreachable(): Promise<void>
  comeBack(): Promise<void>
  /** `vault write -f transit/keys/<key>/rotate`: a new latest version; returns it. */
  rotateTransitKey(key?: string): number
  /** The policy stops granting this path (`/v1/…`): 403 permission denied, as for a token without the capability. */
  denyPath(apiPath: string): void
  /** `vault write transit/keys/<key>/config min_decryption_version=<n>`. */
  setMinDecryptionVersion(version: number, key?: string): void
  /** Counters the tests read. */
  stats: { logins: number; renewals: number; refusedLogins: number; transit: number; kvReads: number; rewrapBatches: number }
  /** Tokens revoked by their holder (`auth/token/revoke-self`), in order. */
  revokedTokens: string[]
  /** Every request's method and path, in order (never bodies). */
  requests: string[]
  /** Every token handed out, for tests that search logs for them. */
  issuedTokens(): string[]
  close(): Promise<void>
}

interface TokenRecord {
  expiresAt: number
}

export async function startFakeVault(options: FakeVaultOptions = {}): Promise<FakeVault> {
  const ttl = options.tokenTtlSeconds ?? 3600
  const approleMount = options.approleMount ?? 'approle'
  const roleId = crypto.randomUUID()
  const secretId = crypto.randomUUID()
  const tokens = new Map<string, TokenRecord>()
  const kv = new Map<string, Record<string, string>>()
  /** Each key's versions (index = version - 1) and its min_decryption_version. */
  const transitKeys = new Map<string, { versions: Buffer[]; minDecryptionVersion: number }>(
    (options.transitKeys ?? ['nodeplane-master']).map((k) => [k, { versions: [crypto.randomBytes(32)], minDecryptionVersion: 1 }]),
  )
  let roleRevoked = false
  const stats = { logins: 0, renewals: 0, refusedLogins: 0, transit: 0, kvReads: 0, rewrapBatches: 0 }
  const requests: string[] = []
  const revokedTokens: string[] = []
  const deniedPaths = new Set<string>()
  const authority = options.tls ? createCertificateAuthority('fake-vault-test-ca') : undefined
  const serverCertificate = authority ? issueCertificate(authority, { commonName: 'fake-vault', usage: 'server', hosts: LOCAL_HOSTS }) : undefined
  const transitKey = (name: string) => {
    const key = transitKeys.get(name)
    if (!key) throw new Error(`no transit key ${name}`)
    return key
  }

  type Sealed = { ciphertext: string; key_version: number }
  const encrypt = (key: { versions: Buffer[] }, plaintext: Buffer): Sealed => {
    const version = key.versions.length
    const iv = crypto.randomBytes(12)
    const cipher = crypto.createCipheriv('aes-256-gcm', key.versions[version - 1] as Buffer, iv)
    const ct = Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()])
    return { ciphertext: `vault:v${version}:${Buffer.concat([iv, ct]).toString('base64')}`, key_version: version }
  }
  /** Vault's decrypt: the plaintext, or the error text it answers 400 with. */
  const decrypt = (key: { versions: Buffer[]; minDecryptionVersion: number }, ciphertext: unknown): Buffer | string => {
    const match = typeof ciphertext === 'string' ? /^vault:v(\d+):([A-Za-z0-9+/=]+)$/.exec(ciphertext) : null
    if (!match) return 'invalid ciphertext: no prefix'
    const version = Number(match[1])
    const versionKey = key.versions[version - 1]
    if (version < key.minDecryptionVersion) return 'ciphertext or signature version is disallowed by policy (too old)'
    if (!versionKey) return 'invalid ciphertext: version is too new'
    const blob = Buffer.from(match[2] as string, 'base64')
    try {
      const decipher = crypto.createDecipheriv('aes-256-gcm', versionKey, blob.subarray(0, 12))
      decipher.setAuthTag(blob.subarray(blob.length - 16))
      return Buffer.concat([decipher.update(blob.subarray(12, blob.length - 16)), decipher.final()])
    } catch {
      return 'cipher: message authentication failed'
    }
  }

  const send = (res: http.ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  }
  const errors = (res: http.ServerResponse, status: number, ...messages: string[]): void => send(res, status, { errors: messages })
  const validToken = (req: http.IncomingMessage): string | undefined => {
    const token = req.headers['x-vault-token']
    if (typeof token !== 'string') return undefined
    const record = tokens.get(token)
    return record && record.expiresAt > Date.now() ? token : undefined
  }
  const newToken = (): { client_token: string; lease_duration: number; renewable: boolean; policies: string[] } => {
    const token = `hvs.${crypto.randomBytes(18).toString('base64url')}`
    tokens.set(token, { expiresAt: Date.now() + ttl * 1000 })
    return { client_token: token, lease_duration: ttl, renewable: true, policies: ['default', 'nodeplane'] }
  }

  const handle = (req: http.IncomingMessage, res: http.ServerResponse, raw: string): void => {
    const url = new URL(req.url ?? '/', 'http://vault')
    const path = url.pathname
    requests.push(`${req.method} ${path}`)
    let body: Record<string, unknown> = {}
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw) as Record<string, unknown>
      } catch {
        return errors(res, 400, 'failed to parse JSON input')
      }
    }
    if (req.method === 'GET' && path === '/v1/sys/health') return send(res, 200, { initialized: true, sealed: false, standby: false })
    if (req.method === 'POST' && path === `/v1/auth/${approleMount}/login`) {
      if (roleRevoked || body.role_id !== roleId || body.secret_id !== secretId) {
        stats.refusedLogins++
        return errors(res, 400, 'invalid role or secret ID')
      }
      stats.logins++
      return send(res, 200, { auth: newToken(), data: null })
    }
    const token = validToken(req)
    if (!token || deniedPaths.has(path)) return errors(res, 403, 'permission denied')
    if (req.method === 'POST' && path === '/v1/auth/token/renew-self') {
      stats.renewals++
      tokens.set(token, { expiresAt: Date.now() + ttl * 1000 })
      return send(res, 200, { auth: { client_token: token, lease_duration: ttl, renewable: true } })
    }
    if (req.method === 'POST' && path === '/v1/auth/token/revoke-self') {
      tokens.delete(token)
      revokedTokens.push(token)
      res.writeHead(204)
      return void res.end()
    }
    const transit = /^\/v1\/transit\/(encrypt|decrypt|rewrap)\/([^/]+)$/.exec(path)
    if (req.method === 'POST' && transit) {
      stats.transit++
      const key = transitKeys.get(decodeURIComponent(transit[2] as string))
      if (!key) return errors(res, 400, 'encryption key not found')
      if (transit[1] === 'encrypt') {
        if (typeof body.plaintext !== 'string') return errors(res, 400, 'missing plaintext to encrypt')
        return send(res, 200, { data: encrypt(key, Buffer.from(body.plaintext, 'base64')) })
      }
      if (transit[1] === 'decrypt') {
        const plain = decrypt(key, body.ciphertext)
        return typeof plain === 'string' ? errors(res, 400, plain) : send(res, 200, { data: { plaintext: plain.toString('base64') } })
      }
      const rewrap = (ciphertext: unknown): Sealed | { error: string } => {
        const plain = decrypt(key, ciphertext)
        return typeof plain === 'string' ? { error: plain } : encrypt(key, plain)
      }
      if (Array.isArray(body.batch_input)) {
        stats.rewrapBatches++
        const results = body.batch_input.map((item: unknown) => rewrap((item as { ciphertext?: unknown } | null)?.ciphertext))
        // Vault answers 400 only when every item failed; otherwise 200 with per-item errors.
        return send(res, results.every((r) => 'error' in r) ? 400 : 200, { data: { batch_results: results } })
      }
      const one = rewrap(body.ciphertext)
      return 'error' in one ? errors(res, 400, one.error) : send(res, 200, { data: one })
    }
    const kvRead = /^\/v1\/([^/]+)\/data\/(.+)$/.exec(path)
    if (req.method === 'GET' && kvRead) {
      stats.kvReads++
      const data = kv.get(`${kvRead[1]}/${kvRead[2]}`)
      if (!data) return errors(res, 404)
      return send(res, 200, { data: { data, metadata: { version: 1, created_time: new Date().toISOString() } } })
    }
    return errors(res, 404, `no handler for route "${path}"`)
  }

  const sockets = new Set<Socket>()
  let server: http.Server | https.Server | undefined
  let port = 0
  const listen = async (): Promise<void> => {
    const onRequest = (req: http.IncomingMessage, res: http.ServerResponse): void => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')))
    }
    const s = serverCertificate ? https.createServer({ cert: serverCertificate.certPem, key: serverCertificate.keyPem }, onRequest) : http.createServer(onRequest)
    s.on('connection', (socket: Socket) => {
      sockets.add(socket)
      socket.on('close', () => sockets.delete(socket))
    })
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject)
      s.listen(port, '127.0.0.1', () => resolve())
    })
    port = (s.address() as AddressInfo).port
    server = s
  }
  const shut = async (): Promise<void> => {
    const s = server
    server = undefined
    if (!s) return
    for (const socket of sockets) socket.destroy()
    await new Promise<void>((resolve) => s.close(() => resolve()))
  }
  await listen()

  return {
    url: `${serverCertificate ? 'https' : 'http'}://127.0.0.1:${port}`,
    caPem: authority?.certPem,
    roleId,
    secretId,
    setSecret: (mountAndPath, data) => kv.set(mountAndPath, data),
    expireTokens: () => {
      for (const record of tokens.values()) record.expiresAt = 0
    },
    revokeRole: () => {
      roleRevoked = true
      for (const record of tokens.values()) record.expiresAt = 0
    },
    restoreRole: () => {
      roleRevoked = false
    },
    goUnreachable: shut,
    comeBack: listen,
    rotateTransitKey: (key = 'nodeplane-master') => {
      const versions = transitKey(key).versions
      versions.push(crypto.randomBytes(32))
      return versions.length
    },
    denyPath: (apiPath) => deniedPaths.add(apiPath),
    setMinDecryptionVersion: (version, key = 'nodeplane-master') => {
      transitKey(key).minDecryptionVersion = version
    },
    stats,
    revokedTokens,
    requests,
    issuedTokens: () => [...tokens.keys()],
    close: shut,
  }
}
