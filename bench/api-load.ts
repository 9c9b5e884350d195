/**
 * API load (issue 9, "Load"): a mixed read/write load at a fixed rate with autocannon against two
 * real `nodeplane daemon api-server` processes on one Postgres and one nats-server, as production
 * runs them; baseline in the same run: two bare Koa hello-world processes behind the same load.
 *
 * The mix, each request with the next of 20 users' API keys in turn: GET /me,
 * GET /subscriptions, GET /chains, GET /nodes, POST /subscriptions (the write: the first creates a
 * pending subscription, later ones find the equal pending one inside a locked transaction, as the
 * spec's rule 1 says). Every request authenticates its key. Reported: p50/p99 latency and errors
 * (non-2xx and socket errors) of each at the same offered rate; ratio = hello-world p99 / API p99.
 *
 * Then the capacity (issue 21): offered rates climbing a ladder (RATE_LADDER), each held for
 * STEP_S; the highest rate each side holds with p99 < P99_LIMIT_MS, no error and at least 95% of
 * the offered requests answered, the API against the two hello-world processes.
 */
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { execa, type ResultPromise } from 'execa'
import { createApiKey } from '../src/auth/api-keys.js'
import { createUser } from '../src/auth/users.js'
import { freePort, waitFor } from '../test/helpers/ports.js'
import { benchDatabase } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const RATE = 400
const DURATION_S = 15
const WARMUP_S = 4
const CONNECTIONS = 20
const RATE_LADDER = [100, 200, 400, 800, 1200, 1600, 2400, 3200, 4800, 6400]
const STEP_S = 6
const P99_LIMIT_MS = 50
const BIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'run.js')

const HELLO_WORLD = `
const Koa = require('koa')
const app = new Koa()
app.use((ctx) => { ctx.body = { hello: 'world' } })
app.listen(Number(process.env.PORT), '127.0.0.1', () => process.stdout.write('listening\\n'))
`

interface LoadResult {
  p50: number
  p99: number
  requests: number
  errors: number
  non2xx: number
}

export const benchApiLoad: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const rate = Math.max(50, Math.round(RATE * ctx.scale))
  const { db, url, drop } = await benchDatabase('postgres', ctx.postgresUrl)
  const children: ResultPromise[] = []
  try {
    const keys: string[] = []
    for (let i = 0; i < CONNECTIONS; i++) {
      const user = await createUser(db, { email: `load-${i}@bench.test`, is_admin: false, external_auth_id: null })
      const issued = await db.transaction((trx) => createApiKey(trx, { userId: user.id, name: 'load', scopes: ['*'], expiresAt: null, allowAdmin: false }, new Date()))
      keys.push(issued.key)
    }

    // Baseline first: two hello-world processes, the same load.
    const helloPorts = [await freePort(), await freePort()]
    for (const port of helloPorts) {
      children.push(execa('node', ['-e', HELLO_WORLD], { env: { PORT: String(port) }, cwd: path.dirname(BIN), reject: false }))
    }
    await Promise.all(helloPorts.map((port) => waitFor(async () => (await fetch(`http://127.0.0.1:${port}/`)).ok, `hello-world on ${port}`)))
    ctx.log(`hello-world x2: ${rate} req/s for ${DURATION_S} s`)
    await load(helloPorts, keys, rate, false, WARMUP_S)
    const hello = await load(helloPorts, keys, rate, false)
    const helloHolds = await capacity(helloPorts, keys, false, ctx.log)

    const apiPorts = [await freePort(), await freePort()]
    for (const port of apiPorts) {
      children.push(
        execa('node', [BIN, 'daemon', 'api-server'], {
          env: { ...process.env, DATABASE_URL: url, NATS_URL: ctx.natsUrl, API_SERVER_PORT: String(port), LOG_LEVEL: 'warn', API_RATE_LIMIT_PER_MINUTE: '1000000' },
          cwd: os.tmpdir(),
          reject: false,
        }),
      )
    }
    await Promise.all(apiPorts.map((port) => waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).ok, `api-server on ${port}`, 30_000)))
    ctx.log(`api-server x2 (Postgres, NATS): ${rate} req/s for ${DURATION_S} s, mixed reads and writes`)
    // Warm-up (JIT, pools, prepared statements), not measured.
    await load(apiPorts, keys, rate, true, WARMUP_S)
    const api = await load(apiPorts, keys, rate, true)
    const apiHolds = await capacity(apiPorts, keys, true, ctx.log)
    const subscriptions = Number(((await db('subscriptions').count({ n: '*' })) as Array<{ n: number | string }>)[0]?.n ?? 0)
    ctx.log(`api: p50 ${api.p50} ms, p99 ${api.p99} ms, ${api.requests} requests, ${api.errors} errors, ${api.non2xx} non-2xx; hello: p50 ${hello.p50} ms, p99 ${hello.p99} ms`)
    if (subscriptions !== CONNECTIONS) throw new Error(`expected one pending subscription per user, found ${subscriptions}`)

    figures.push(
      figure({
        name: `mixed API load at ${rate} req/s over ${CONNECTIONS} keys on two api-server processes (postgres, NATS); p50 ${api.p50} ms, p99 ${api.p99} ms, ${api.requests} requests, errors ${api.errors}, non-2xx ${api.non2xx}`,
        baseline: `two bare Koa hello-world processes, same rate and connections: p50 ${hello.p50} ms, p99 ${hello.p99} ms, errors ${hello.errors}`,
        unit: 'inverse p99 ms',
        value: 1 / Math.max(api.p99, 0.1),
        baselineValue: 1 / Math.max(hello.p99, 0.1),
        notes: 'ratio = hello-world p99 / API p99; the mix is GET /me, /subscriptions, /chains, /nodes and POST /subscriptions per connection; autocannon, both servers and Postgres share 2 cores',
      }),
      figure({
        name: `highest rate of the mixed API load held with p99 < ${P99_LIMIT_MS} ms and no errors, two api-server processes (postgres, NATS): ${describeHold(apiHolds)}`,
        baseline: `two bare Koa hello-world processes, same ladder: ${describeHold(helloHolds)}`,
        unit: 'requests/s',
        value: apiHolds.held?.rate ?? 0,
        baselineValue: helloHolds.held?.rate ?? 0,
        notes: `offered rates ${RATE_LADDER.join(', ')} req/s, ${STEP_S} s each, climbing until one fails (p99 >= ${P99_LIMIT_MS} ms, an error, or under 95% of the offered requests answered); a side that holds the top of the ladder is reported at it`,
      }),
    )
  } finally {
    for (const child of children) child.kill('SIGTERM')
    await Promise.all(children.map((c) => c.catch(() => undefined)))
    await drop()
  }
  return figures
}

interface Hold {
  /** The highest rate held, with its result; none: not even the first. */
  held?: { rate: number; result: LoadResult }
  /** The first rate not held, and why. */
  failed?: { rate: number; why: string }
}

function describeHold(hold: Hold): string {
  const held = hold.held ? `${hold.held.rate} req/s held (p99 ${hold.held.result.p99} ms)` : `not even ${RATE_LADDER[0]} req/s held`
  return hold.failed ? `${held}; ${hold.failed.rate} req/s not (${hold.failed.why})` : `${held}, the top of the ladder`
}

async function capacity(ports: number[], keys: string[], api: boolean, log: (line: string) => void): Promise<Hold> {
  const hold: Hold = {}
  for (const rate of RATE_LADDER) {
    const result = await load(ports, keys, rate, api, STEP_S)
    const answered = result.requests / (rate * STEP_S)
    const why =
      result.errors + result.non2xx > 0
        ? `${result.errors} errors, ${result.non2xx} non-2xx`
        : result.p99 >= P99_LIMIT_MS
          ? `p99 ${result.p99} ms`
          : answered < 0.95
            ? `${Math.round(answered * 100)}% of the offered requests answered`
            : undefined
    log(`${api ? 'api' : 'hello'} at ${rate} req/s: p50 ${result.p50} ms, p99 ${result.p99} ms, ${result.requests} requests${why ? ` -> not held: ${why}` : ''}`)
    if (why) {
      hold.failed = { rate, why }
      break
    }
    hold.held = { rate, result }
  }
  return hold
}

/** Half the rate to each of two servers at once; latencies merged as the worse of the two. */
async function load(ports: number[], keys: string[], rate: number, api: boolean, durationS = DURATION_S): Promise<LoadResult> {
  const runs = ports.map((port, p) => {
    const mine = keys.filter((_, i) => i % ports.length === p)
    let next = 0
    // Each request carries the next key in turn (autocannon's per-request hook), so every user
    // reads and writes through every connection.
    const auth = (req: autocannon.Request): autocannon.Request => ({ ...req, headers: { ...(req.headers ?? {}), authorization: `Bearer ${mine[next++ % mine.length]}` } })
    const requests: autocannon.Request[] = api
      ? [
          { method: 'GET', path: '/api/v1/me', setupRequest: auth },
          { method: 'GET', path: '/api/v1/subscriptions?limit=20', setupRequest: auth },
          { method: 'GET', path: '/api/v1/chains', setupRequest: auth },
          { method: 'GET', path: '/api/v1/nodes', setupRequest: auth },
          { method: 'POST', path: '/api/v1/subscriptions', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }), setupRequest: auth },
        ]
      : [{ method: 'GET', path: '/', setupRequest: auth }]
    return autocannon({
      url: `http://127.0.0.1:${port}`,
      connections: mine.length,
      overallRate: rate / ports.length,
      duration: durationS,
      requests,
    })
  })
  const results = await Promise.all(runs)
  return {
    p50: Math.max(...results.map((r) => r.latency.p50)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
    requests: results.reduce((n, r) => n + r.requests.total, 0),
    errors: results.reduce((n, r) => n + r.errors + r.timeouts, 0),
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
  }
}
