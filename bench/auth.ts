/**
 * Authenticated reads on the api-server, as production runs it and as a client sees it (issue 21):
 * `nodeplane daemon api-server` in its own process (a real database, NATS, the default log level
 * with its access line per request, written to /dev/null), driven by autocannon's CLI in another
 * process, 16 connections kept alive. Measured in interleaved rounds against an unauthenticated
 * `GET /health` on the same server:
 *
 * - `GET /api/v1/me` with an API key, and with a wallet-path RS256 JWT (verified against a served
 *   JWKS, as the auth-server issues them);
 * - `GET /api/v1/nodes?limit=50` with an API key, the user owning 50 nodes.
 *
 * Two figures per request: requests/s (median round), and the server's CPU per request (its
 * process's user + system time over the round, /proc), which a busy machine disturbs less.
 * Any non-2xx answer or socket error fails the run.
 */
import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createApiKey } from '../src/auth/api-keys.js'
import { LEGACY_JWKS_PATH } from '../src/auth/legacy-tokens.js'
import { signingKeyFromPem } from '../src/auth/signing-key.js'
import { createTokenIssuer, type JsonWebKeySet } from '../src/auth/token-issuer.js'
import { createUser } from '../src/auth/users.js'
import { insertNode } from '../src/nodes/node-store.js'
import { insertSubscriptionOf } from '../test/helpers/fixtures.js'
import { freePort } from '../test/helpers/ports.js'
import { startBenchDaemon, type BenchDaemon } from './daemon.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const CONNECTIONS = 16
const NODES = 50
const ROUNDS = 5
const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const AUTOCANNON = path.join(ROOT, 'node_modules', 'autocannon', 'autocannon.js')
const CLOCK_TICKS_PER_SECOND = 100
const run = promisify(execFile)

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

/** CPU seconds (user + system) a process has used, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND
}

interface Round {
  requestsPerSecond: number
  cpuMicrosPerRequest: number
}

interface Target {
  path: string
  headers: Record<string, string>
}

/** One round of autocannon's CLI against `target` for `seconds`; fails on any non-2xx or error. */
async function round(base: string, target: Target, seconds: number, serverPid: number): Promise<Round> {
  const args = [AUTOCANNON, '-c', String(CONNECTIONS), '-d', String(seconds), '-j']
  for (const [name, value] of Object.entries(target.headers)) args.push('-H', `${name}=${value}`)
  args.push(`${base}${target.path}`)
  const before = cpuSeconds(serverPid)
  const { stdout } = await run(process.execPath, args, { maxBuffer: 16 * 1024 * 1024 })
  const used = cpuSeconds(serverPid) - before
  const result = JSON.parse(stdout) as { requests: { average: number; total: number }; non2xx: number; errors: number; timeouts: number }
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    throw new Error(`${target.path}: ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts of ${result.requests.total}`)
  }
  return { requestsPerSecond: result.requests.average, cpuMicrosPerRequest: (used / Math.max(1, result.requests.total)) * 1e6 }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

export const benchAuth: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const seconds = Math.max(1, Math.round(3 * ctx.scale))
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
  const signingKey = await signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), 'bench (in memory)')
  const issuer = createTokenIssuer({ key: signingKey, accessTokenTtlMs: 3_600_000 })
  const jwks = await startJwksServer(issuer.jwks())
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const database = await benchDatabase(dialect, ctx.postgresUrl)
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-auth-'))
      let daemon: BenchDaemon | undefined
      try {
        const { db } = database
        const user = await createUser(db, { email: `bench-${crypto.randomBytes(4).toString('hex')}@example.test` })
        const { key } = await db.transaction((trx) => createApiKey(trx, { userId: user.id, name: 'bench', scopes: ['*'] }))
        const { token } = await issuer.issueAccessToken(user.id, new Date())
        for (let i = 0; i < NODES; i++) {
          const subscriptionId = await insertSubscriptionOf(db, user.id)
          await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full', provider: 'local' })
        }

        const port = await freePort()
        daemon = await startBenchDaemon('api-server', {
          DATABASE_URL: database.url,
          NATS_URL: ctx.natsUrl,
          API_SERVER_PORT: String(port),
          AUTH_PROVIDER: 'both',
          AUTH_LEGACY_JWKS_URL: jwks.url,
          API_RATE_LIMIT_PER_MINUTE: '1000000',
          NODEPLANE_DATA_DIR: dataDir,
        }, port)
        const base = `http://127.0.0.1:${port}`
        const targets: Record<'health' | 'apiKey' | 'jwt' | 'nodes', Target> = {
          health: { path: '/health', headers: {} },
          apiKey: { path: '/api/v1/me', headers: { 'X-API-Key': key } },
          jwt: { path: '/api/v1/me', headers: { Authorization: `Bearer ${token}` } },
          nodes: { path: `/api/v1/nodes?limit=${NODES}`, headers: { 'X-API-Key': key } },
        }
        // Each answers what it should before anything is timed (this also fetches the key set).
        const nodes = (await (await fetch(`${base}${targets.nodes.path}`, { headers: targets.nodes.headers })).json()) as { items?: unknown[] }
        if (nodes.items?.length !== NODES) throw new Error(`GET /api/v1/nodes answered ${nodes.items?.length ?? 'no'} items, expected ${NODES}`)
        for (const name of ['apiKey', 'jwt'] as const) {
          const me = (await (await fetch(`${base}/api/v1/me`, { headers: targets[name].headers })).json()) as { user_id?: string }
          if (me.user_id !== user.id) throw new Error(`GET /api/v1/me with ${name} did not answer the user`)
        }

        const pid = daemon.child.pid!
        const rounds = new Map<keyof typeof targets, Round[]>()
        for (const name of Object.keys(targets) as Array<keyof typeof targets>) await round(base, targets[name], 1, pid) // warm-up (JIT, pools, statements)
        for (let r = 0; r < ROUNDS; r++) {
          for (const name of Object.keys(targets) as Array<keyof typeof targets>) {
            rounds.set(name, [...(rounds.get(name) ?? []), await round(base, targets[name], seconds, pid)])
          }
        }
        const rate = (name: keyof typeof targets) => median(rounds.get(name)!.map((x) => x.requestsPerSecond))
        const cpu = (name: keyof typeof targets) => median(rounds.get(name)!.map((x) => x.cpuMicrosPerRequest))
        ctx.log(
          `${dialect}: ` +
            (Object.keys(targets) as Array<keyof typeof targets>).map((name) => `${name} ${rate(name).toFixed(0)}/s ${cpu(name).toFixed(0)} µs CPU/request`).join(', '),
        )
        const how = `autocannon CLI in its own process, ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${seconds} s (median); the api-server alone in its own process at LOG_LEVEL=info, stdout to /dev/null`
        for (const [name, label, aim] of [
          ['apiKey', 'GET /api/v1/me with an API key', '>= 0.6'],
          ['jwt', 'GET /api/v1/me with a wallet-path JWT', '>= 0.6'],
          ['nodes', `GET /api/v1/nodes?limit=${NODES} with an API key, ${NODES} nodes`, '>= 0.5'],
        ] as const) {
          figures.push(
            figure({
              name: `${label} (${dialect})`,
              baseline: `unauthenticated GET /health, same server, same run (${dialect})`,
              unit: 'requests/s',
              value: rate(name),
              baselineValue: rate('health'),
              aim,
              notes: how,
            }),
            figure({
              name: `${label}, server CPU per request (${dialect}); ${cpu(name).toFixed(0)} µs vs ${cpu('health').toFixed(0)} µs`,
              baseline: `unauthenticated GET /health, same server, same run (${dialect})`,
              unit: 'requests per CPU-second',
              value: 1e6 / cpu(name),
              baselineValue: 1e6 / cpu('health'),
              aim,
              notes: `${how}; CPU from /proc (user + system) over each round`,
            }),
          )
        }
      } finally {
        await daemon?.stop()
        await database.drop()
        fs.rmSync(dataDir, { recursive: true, force: true })
      }
    }
  } finally {
    await jwks.stop()
  }
  return figures
}
