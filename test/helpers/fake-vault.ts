/**
 * A local fake of HashiCorp Vault for tests only: a real HTTP server speaking the documented
 * endpoints nodeplane uses (https://developer.hashicorp.com/vault/api-docs):
 * - POST /v1/auth/<approle mount>/login {role_id, secret_id} -> {auth: {client_token, lease_duration, renewable}}
 * - POST /v1/auth/token/renew-self (X-Vault-Token) -> {auth: {client_token, lease_duration, renewable}}
 * - GET  /v1/<mount>/data/<path> -> {data: {data: {...}, metadata: {version}}}  (KV version 2)
 * - POST /v1/transit/encrypt/<key> {plaintext} -> {data: {ciphertext: "vault:v1:…", key_version}}
 * - POST /v1/transit/decrypt/<key> {ciphertext} -> {data: {plaintext}}
 * - GET  /v1/sys/health -> 200
 * Errors are Vault's: a status and {"errors": [...]}; a missing or expired token is 403
 * "permission denied". Controls: expire every token, revoke and restore the role, go unreachable
 * (the port closes, connections reset) and come back on the same port.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

export interface FakeVaultOptions {
  /** Lease of a login token, seconds (Vault's token_ttl). */
  tokenTtlSeconds?: number
  /** Transit keys that exist. */
  transitKeys?: string[]
  approleMount?: string
}

export interface FakeVault {
  url: string
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
  /** Counters the tests read. */
  stats: { logins: number; renewals: number; refusedLogins: number; transit: number; kvReads: number }
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
  const transitKeys = new Map<string, Buffer>((options.transitKeys ?? ['nodeplane-master']).map((k) => [k, crypto.randomBytes(32)]))
  let roleRevoked = false
  const stats = { logins: 0, renewals: 0, refusedLogins: 0, transit: 0, kvReads: 0 }
  const requests: string[] = []

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
    if (!token) return errors(res, 403, 'permission denied')
    if (req.method === 'POST' && path === '/v1/auth/token/renew-self') {
      stats.renewals++
      tokens.set(token, { expiresAt: Date.now() + ttl * 1000 })
      return send(res, 200, { auth: { client_token: token, lease_duration: ttl, renewable: true } })
    }
    const transit = /^\/v1\/transit\/(encrypt|decrypt)\/([^/]+)$/.exec(path)
    if (req.method === 'POST' && transit) {
      stats.transit++
      const key = transitKeys.get(decodeURIComponent(transit[2] as string))
      if (!key) return errors(res, 400, 'encryption key not found')
      if (transit[1] === 'encrypt') {
        if (typeof body.plaintext !== 'string') return errors(res, 400, 'missing plaintext to encrypt')
        const iv = crypto.randomBytes(12)
        const cipher = crypto.createCipheriv('aes-256-gcm', key, iv)
        const ct = Buffer.concat([cipher.update(Buffer.from(body.plaintext, 'base64')), cipher.final(), cipher.getAuthTag()])
        return send(res, 200, { data: { ciphertext: `vault:v1:${Buffer.concat([iv, ct]).toString('base64')}`, key_version: 1 } })
      }
      const match = typeof body.ciphertext === 'string' ? /^vault:v1:([A-Za-z0-9+/=]+)$/.exec(body.ciphertext) : null
      if (!match) return errors(res, 400, 'invalid ciphertext: no prefix')
      const blob = Buffer.from(match[1] as string, 'base64')
      try {
        const decipher = crypto.createDecipheriv('aes-256-gcm', key, blob.subarray(0, 12))
        decipher.setAuthTag(blob.subarray(blob.length - 16))
        const plain = Buffer.concat([decipher.update(blob.subarray(12, blob.length - 16)), decipher.final()])
        return send(res, 200, { data: { plaintext: plain.toString('base64') } })
      } catch {
        return errors(res, 400, 'cipher: message authentication failed')
      }
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
  let server: http.Server | undefined
  let port = 0
  const listen = async (): Promise<void> => {
    const s = http.createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')))
    })
    s.on('connection', (socket) => {
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
    url: `http://127.0.0.1:${port}`,
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
    stats,
    requests,
    issuedTokens: () => [...tokens.keys()],
    close: shut,
  }
}
