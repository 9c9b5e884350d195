/**
 * Authenticated request throughput on the API server: GET /api/v1/me with an API key and with
 * a wallet-path RS256 JWT (as the auth-server issues them, verified against a served JWKS),
 * each against an unauthenticated GET /health on the same server, same run. The server has a
 * real database (SQLite, Postgres), a local bus and a rate limit too high to refuse; the client
 * keeps CONCURRENCY requests in flight on keep-alive connections. Every request must answer
 * 2xx. Aim: >= 0.6 of the /health rate.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { startApiServer, type RunningServer } from '../daemons/api-server.js'
import { createApiKey } from '../src/auth/api-keys.js'
import { LEGACY_JWKS_PATH } from '../src/auth/legacy-tokens.js'
import { signingKeyFromPem } from '../src/auth/signing-key.js'
import { createTokenIssuer, type JsonWebKeySet } from '../src/auth/token-issuer.js'
import { createUser } from '../src/auth/users.js'
import { apiServerEnv, loadConfig } from '../src/config/env.js'
import { createLocalBus } from '../src/events/local-bus.js'
import { createLogger } from '../src/log.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, interleaved, type Bench, type BenchFigure } from './lib.js'

/** Requests kept in flight by the client. */
const CONCURRENCY = 16

/** Serves a key set at /.well-known/jwks.json, as the auth-server does. */
async function startJwksServer(jwks: JsonWebKeySet): Promise<{ url: string; stop(): Promise<void> }> {
  const body = JSON.stringify(jwks)
  const server = http.createServer((req, res) => {
    if (req.url !== LEGACY_JWKS_PATH) {
      res.writeHead(404).end()
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(body)
  })
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}${LEGACY_JWKS_PATH}`,
    stop: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections()
        server.close((err) => (err ? reject(err) : resolve()))
      }),
  }
}

interface Response {
  status: number
  body: string
}

function get(agent: http.Agent, base: URL, path: string, headers: Record<string, string>): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = http.get({ agent, host: base.hostname, port: base.port, path, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('error', reject)
  })
}

/**
 * A closed-loop load of CONCURRENCY requests in flight, one per named request, shaped for
 * `interleaved`: each call of an op waits for one of its requests to complete and starts the
 * next, so throughput() counts completions at a constant concurrency. The first call after a
 * switch (throughput's untimed warm-up call) first lets the previous op's requests finish, then
 * fills the pipeline, so no round pays for or profits from another's requests.
 */
class ClosedLoop {
  private active: string | undefined
  private inflight = 0
  private completed = 0
  private waiter: (() => void) | undefined
  private idle: (() => void) | undefined
  readonly failures = new Map<string, number>()
  readonly requests = new Map<string, number>()

  constructor(
    private readonly agent: http.Agent,
    private readonly base: URL,
  ) {}

  op(name: string, path: string, headers: Record<string, string>): () => Promise<void> {
    return async () => {
      if (this.active !== name) {
        await this.drain()
        this.active = name
        for (let i = 0; i < CONCURRENCY; i++) this.start(name, path, headers)
      }
      await this.nextCompletion()
      this.start(name, path, headers)
    }
  }

  /** Waits until no request of any op is in flight. */
  async drain(): Promise<void> {
    if (this.inflight > 0) await new Promise<void>((resolve) => (this.idle = resolve))
    this.active = undefined
    this.completed = 0
  }

  private async nextCompletion(): Promise<void> {
    if (this.completed === 0) await new Promise<void>((resolve) => (this.waiter = resolve))
    this.completed--
  }

  private start(name: string, path: string, headers: Record<string, string>): void {
    this.inflight++
    this.requests.set(name, (this.requests.get(name) ?? 0) + 1)
    const done = (ok: boolean) => {
      if (!ok) this.failures.set(name, (this.failures.get(name) ?? 0) + 1)
      this.inflight--
      this.completed++
      const waiter = this.waiter
      this.waiter = undefined
      waiter?.()
      if (this.inflight === 0) {
        const idle = this.idle
        this.idle = undefined
        idle?.()
      }
    }
    get(this.agent, this.base, path, headers).then(
      (res) => done(res.status >= 200 && res.status < 300),
      () => done(false),
    )
  }
}

export const benchAuth: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const logger = createLogger({ level: 'silent' })
  // The signing key as the auth-server holds it, without a key file.
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
  const signingKey = await signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), 'bench (in memory)')
  const issuer = createTokenIssuer({ key: signingKey, accessTokenTtlMs: 3_600_000 })
  const jwks = await startJwksServer(issuer.jwks())
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const database = await benchDatabase(dialect, ctx.postgresUrl)
      const bus = createLocalBus({ logger })
      let server: RunningServer | undefined
      const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })
      try {
        const { db } = database
        const config = loadConfig(apiServerEnv, {
          DATABASE_URL: database.url,
          LOG_LEVEL: 'silent',
          AUTH_PROVIDER: 'both',
          AUTH_LEGACY_JWKS_URL: jwks.url,
          API_RATE_LIMIT_PER_MINUTE: '1000000',
        })
        server = await startApiServer({ ...config, API_SERVER_PORT: 0 }, { db, bus, logger })
        const base = new URL(server.url)

        const user = await createUser(db, { email: `bench-${crypto.randomBytes(4).toString('hex')}@example.test` })
        const { key, apiKey } = await db.transaction((trx) => createApiKey(trx, { userId: user.id, name: 'bench', scopes: ['*'] }))
        const { token } = await issuer.issueAccessToken(user.id, new Date())
        const withKey = { authorization: `Bearer ${key}` }
        const withJwt = { authorization: `Bearer ${token}` }

        // Each credential is accepted as what it is before anything is timed (this also fetches the key set).
        for (const [headers, method] of [
          [withKey, 'api_key'],
          [withJwt, 'jwt'],
        ] as const) {
          const res = await get(agent, base, '/api/v1/me', headers)
          const body = res.status === 200 ? (JSON.parse(res.body) as { user_id?: string; auth_method?: string; api_key_id?: string }) : undefined
          if (body?.user_id !== user.id || body.auth_method !== method || (method === 'api_key' && body.api_key_id !== apiKey.id)) {
            throw new Error(`GET /api/v1/me with ${method} answered ${res.status}: ${res.body.slice(0, 200)}`)
          }
        }
        const health = await get(agent, base, '/health', {})
        if (health.status !== 200) throw new Error(`GET /health answered ${health.status}`)

        const load = new ClosedLoop(agent, base)
        const ops = {
          health: load.op('health', '/health', {}),
          apiKey: load.op('apiKey', '/api/v1/me', withKey),
          jwt: load.op('jwt', '/api/v1/me', withJwt),
        }
        // Untimed warm-up of every path (JIT, pool, key set), so a quick run does not measure a cold server.
        await interleaved(ops, { rounds: 1, msPerRound: 300 })
        const rates = await interleaved(ops, { msPerRound: 400 * ctx.scale })
        await load.drain()
        const failed = [...load.failures].filter(([, n]) => n > 0)
        if (failed.length > 0) {
          throw new Error(`requests failed (${dialect}): ${failed.map(([name, n]) => `${name} ${n} of ${load.requests.get(name)}`).join(', ')}`)
        }

        ctx.log(
          `${dialect}: /me with API key ${rates.apiKey.toFixed(0)}/s, with JWT ${rates.jwt.toFixed(0)}/s, /health ${rates.health.toFixed(0)}/s ` +
            `(${CONCURRENCY} in flight; requests sent, warm-up included: ${[...load.requests].map(([n, c]) => `${n} ${c}`).join(', ')})`,
        )
        figures.push(
          figure({
            name: `GET /api/v1/me with an API key (${dialect})`,
            baseline: `unauthenticated GET /health (${dialect})`,
            unit: 'requests/s',
            value: rates.apiKey,
            baselineValue: rates.health,
            aim: '>= 0.6',
            notes: `${CONCURRENCY} requests in flight on keep-alive connections, interleaved rounds`,
          }),
          figure({
            name: `GET /api/v1/me with a wallet-path JWT (${dialect})`,
            baseline: `unauthenticated GET /health (${dialect})`,
            unit: 'requests/s',
            value: rates.jwt,
            baselineValue: rates.health,
            aim: '>= 0.6',
            notes: `RS256 verified against a served JWKS; ${CONCURRENCY} requests in flight on keep-alive connections, interleaved rounds`,
          }),
        )
      } finally {
        agent.destroy()
        await server?.stop()
        await bus.close()
        await database.drop()
      }
    }
  } finally {
    await jwks.stop()
  }
  return figures
}
