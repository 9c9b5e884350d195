/**
 * Payment completed -> provisioning started through the production processes (the payments
 * bench, bench/payments.ts, runs the consumer in its own process without the confirmation):
 * a real `nodeplane daemon payment-service` (card provider) and `nodeplane daemon
 * orchestrator` (payment consumer at its default concurrency, confirming every
 * payment.completed with GetPayment over mTLS gRPC), on the bench's Postgres (or SQLite files)
 * and nats-server, default log level, stdout to /dev/null.
 *
 * Each payment: a pending subscription in the control-plane database linked to a pending card
 * payment in the payments database with its checkout session id. The completion is the card
 * processor's signed `checkout.session.completed` webhook, POSTed to the payment service by
 * another process (bench/webhook-poster.ts), never from this event loop. The end is seen by
 * polling the control-plane database (one query every POLL_MS): the subscription active with
 * its provision workflow run started.
 *
 * - latency: one payment at a time, from the POST to the activation seen; p50 and p99 against
 *   a bare JetStream publish -> consume round trip's p50;
 * - throughput: a burst of webhooks, BURST_IN_FLIGHT at a time, from the first POST to the last
 *   activation; payments/s against a burst of bare round trips.
 *
 * The log breaks both down by the rows' own timestamps (webhook POST -> payment completed ->
 * outbox published -> subscription activated -> seen), times a GetPayment round trip from
 * this process, and gives the CPU per payment of each daemon and of their Postgres backends
 * over the burst (/proc). The orchestrator's workflow worker polls only hourly here: executing
 * the provision runs (local hosts, agents) is not part of the figure and would swamp 2 cores.
 */
import { execFile, fork, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { connect, type JetStreamManager } from 'nats'
import { staticChainSource } from '../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue } from '../src/config/chains.js'
import type { Db } from '../src/db/knex.js'
import { PaymentClient } from '../src/payments/client.js'
import { createLocalMasterKey } from '../src/secrets/master-key.js'
import { PAYMENT_CONSUMER_DURABLE } from '../src/subscriptions/activation.js'
import { FakeCardProcessor, signedDelivery, type FakeSession } from '../test/helpers/fake-card-processor.js'
import { freePort } from '../test/helpers/ports.js'
import { startBenchDaemon, type BenchDaemon } from './daemon.js'
import { benchDatabase, type BenchDatabase, type Dialect } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'
import { bareJetStream, percentile } from './jetstream-baseline.js'
import { MS_PER_TICK, processTicks } from './payments-trace.js'
import { insertPendingPayment } from './pending-payment.js'

/** What bench/webhook-poster.ts is asked and answers. */
export interface WebhookPostRequest {
  deliveries: Array<{ payload: string; signature: string }>
  inFlight: number
}
export interface WebhookPost {
  postedAt: number
  answeredAt: number
  status: number
  outcome: string
}

const BIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'run.js')
const POSTER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'webhook-poster.ts')
const POLL_MS = 5
const BURST_POLL_MS = 10
const BURST_IN_FLIGHT = 16
const AMOUNT_MINOR = 1500
const DAEMON_APPS = ['nodeplane-payment-service', 'nodeplane-orchestrator'] as const
const run = promisify(execFile)
const clock = (): number => performance.timeOrigin + performance.now()

function median(values: number[]): number {
  return percentile([...values].sort((a, b) => a - b), 0.5)
}

/** A stored timestamp (Date on Postgres; number or ISO text on SQLite) as epoch ms. */
function epochMs(value: unknown): number {
  if (value instanceof Date) return value.getTime()
  if (typeof value === 'number') return value
  return new Date(String(value)).getTime()
}

interface CertsResult {
  ca_file: string
  server_cert_file: string
  server_key_file: string
  clients: Array<{ name: string; cert_file: string; key_file: string }>
}

/** A payment ready to be completed by its webhook. */
interface Prepared {
  subscriptionId: string
  paymentId: string
  session: FakeSession
}

/** The poster process; `post` resolves with one answer per delivery, in order. */
function startPoster(webhookUrl: string): { post(request: WebhookPostRequest): Promise<WebhookPost[]>; child: ChildProcess; stop(): Promise<void> } {
  const child = fork(POSTER, [webhookUrl], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  return {
    child,
    post: (request) =>
      new Promise((resolve, reject) => {
        const onExit = (code: number | null) => reject(new Error(`the webhook poster exited ${code}`))
        child.once('exit', onExit)
        child.once('message', (answer: { posts: WebhookPost[] }) => {
          child.off('exit', onExit)
          resolve(answer.posts)
        })
        child.send(request)
      }),
    stop: async () => {
      if (child.connected) child.disconnect()
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      await exited
    },
  }
}

/** CPU ticks of the daemons' Postgres backends, by pid, with the application each belongs to. */
async function backendTicks(db: Db): Promise<Map<number, { app: string; ticks: number }>> {
  const result = (await db.raw(`select pid, application_name from pg_stat_activity where application_name in (${DAEMON_APPS.map(() => '?').join(', ')})`, [...DAEMON_APPS])) as {
    rows: Array<{ pid: number; application_name: string }>
  }
  return new Map(result.rows.map((r) => [r.pid, { app: r.application_name, ticks: processTicks(r.pid) }]))
}

function machineTicks(): [number, number] {
  const cpu = (fs.readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number)
  const total = cpu.reduce((a, b) => a + b, 0)
  return [total - (cpu[3] ?? 0) - (cpu[4] ?? 0), total]
}

export const benchPaymentsDaemons: Bench = async (ctx) => {
  const latencyRuns = Math.max(30, Math.round(200 * ctx.scale))
  const burst = Math.max(50, Math.round(300 * ctx.scale))
  const catalogue = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
  const figures: BenchFigure[] = []
  const bare = await bareJetStream(ctx.natsUrl, latencyRuns, burst, 'bench-payments-daemons')
  ctx.log(`bare JetStream round trip: p50 ${bare.p50.toFixed(2)} ms, p99 ${bare.p99.toFixed(2)} ms, burst ${bare.rate.toFixed(0)}/s`)

  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-payments-daemons-'))
  const nc = await connect({ servers: ctx.natsUrl, name: 'bench-payments-daemons-admin' })
  const secretKey = `sk_test_bench_${crypto.randomBytes(12).toString('hex')}`
  const webhookSecret = `whsec_bench_${crypto.randomBytes(12).toString('hex')}`
  const fake = await FakeCardProcessor.start({ secretKey })
  try {
    const { stdout } = await run(process.execPath, [BIN, 'certs', 'dev', '--dir', path.join(root, 'certs'), '--client', 'nodeplane-control-plane', '--json'], { cwd: root })
    const certs = JSON.parse(stdout) as CertsResult
    const clientCert = certs.clients.find((c) => c.name === 'nodeplane-control-plane') as CertsResult['clients'][number]
    const masterKeyFile = path.join(root, 'master.key')
    await createLocalMasterKey(masterKeyFile)
    const jsm = await nc.jetstreamManager()
    for (const dialect of ['postgres', 'sqlite'] as Dialect[]) {
      figures.push(
        ...(await benchDialect(ctx, {
          dialect,
          root,
          jsm,
          fake,
          certs,
          clientCert,
          masterKeyFile,
          secretKey,
          webhookSecret,
          catalogue,
          latencyRuns,
          burst,
          bare,
        })),
      )
    }
  } finally {
    await fake.close()
    await nc.close()
    fs.rmSync(root, { recursive: true, force: true })
  }
  return figures
}

interface DialectSetup {
  dialect: Dialect
  root: string
  jsm: JetStreamManager
  fake: FakeCardProcessor
  certs: CertsResult
  clientCert: CertsResult['clients'][number]
  masterKeyFile: string
  secretKey: string
  webhookSecret: string
  catalogue: ReturnType<typeof staticChainSource>
  latencyRuns: number
  burst: number
  bare: { p50: number; p99: number; rate: number }
}

async function benchDialect(ctx: Parameters<Bench>[0], s: DialectSetup): Promise<BenchFigure[]> {
  const { dialect } = s
  // NODEPLANE_BENCH_PROFILE_DIR=<dir>: each daemon writes a CPU profile of its whole run there.
  const profileArgs = (name: string): string[] => {
    const dir = process.env.NODEPLANE_BENCH_PROFILE_DIR
    return dir ? ['--cpu-prof', `--cpu-prof-dir=${dir}`, `--cpu-prof-name=${name}-${dialect}.cpuprofile`] : []
  }
  const controlPlane = await benchDatabase(dialect, ctx.postgresUrl, 'control-plane')
  const payments = await benchDatabase(dialect, ctx.postgresUrl, 'payments')
  const daemons: BenchDaemon[] = []
  let poster: ReturnType<typeof startPoster> | undefined
  let client: PaymentClient | undefined
  try {
    // A fresh durable on an empty stream: no earlier payment event reaches this orchestrator.
    await s.jsm.streams.purge('PAYMENTS').catch(() => undefined)
    await s.jsm.consumers.delete('PAYMENTS', PAYMENT_CONSUMER_DURABLE).catch(() => undefined)
    const dataDir = path.join(s.root, `data-${dialect}`)
    const ports = { grpc: await freePort(), http: await freePort(), metrics: await freePort() }
    const paymentService = await startBenchDaemon(
      'payment-service',
      {
        NODEPLANE_DATA_DIR: dataDir,
        PAYMENTS_DATABASE_URL: payments.url,
        NATS_URL: ctx.natsUrl,
        PAYMENT_TLS_CA_FILE: s.certs.ca_file,
        PAYMENT_TLS_CERT_FILE: s.certs.server_cert_file,
        PAYMENT_TLS_KEY_FILE: s.certs.server_key_file,
        PAYMENT_GRPC_PORT: String(ports.grpc),
        PAYMENT_HTTP_PORT: String(ports.http),
        PAYMENT_METRICS_PORT: String(ports.metrics),
        CARD_PROVIDER_ENABLED: 'true',
        CARD_PROVIDER_SECRET_KEY: s.secretKey,
        CARD_PROVIDER_WEBHOOK_SECRET: s.webhookSecret,
        CARD_PROVIDER_API_URL: s.fake.url,
      },
      ports.http,
      profileArgs('payment-service'),
    )
    daemons.push(paymentService)
    const orchestrator = await startBenchDaemon(
      'orchestrator',
      {
        NODEPLANE_DATA_DIR: dataDir,
        DATABASE_URL: controlPlane.url,
        NATS_URL: ctx.natsUrl,
        SECRETS_MASTER_KEY_FILE: s.masterKeyFile,
        // Read at start only; no agent is ever started here.
        AGENT_GATEWAY_CA_FILE: s.certs.ca_file,
        LOCAL_HOSTS_DIR: path.join(dataDir, 'hosts'),
        WORKFLOW_POLL_INTERVAL: '1h',
        PAYMENT_SERVICE_URL: `127.0.0.1:${ports.grpc}`,
        PAYMENT_TLS_CA_FILE: s.certs.ca_file,
        PAYMENT_CLIENT_CERT_FILE: s.clientCert.cert_file,
        PAYMENT_CLIENT_KEY_FILE: s.clientCert.key_file,
      },
      // No HTTP: ready once its payment consumer pulls (the consumer is the last thing it starts).
      async () => ((await s.jsm.consumers.info('PAYMENTS', PAYMENT_CONSUMER_DURABLE).catch(() => undefined))?.num_waiting ?? 0) > 0,
      profileArgs('orchestrator'),
    )
    daemons.push(orchestrator)
    poster = startPoster(`http://127.0.0.1:${ports.http}/webhooks/card-provider`)
    client = new PaymentClient({
      target: `127.0.0.1:${ports.grpc}`,
      ca: fs.readFileSync(s.certs.ca_file),
      cert: fs.readFileSync(s.clientCert.cert_file),
      key: fs.readFileSync(s.clientCert.key_file),
      timeoutMs: 10_000,
    })

    const prepare = async (): Promise<Prepared> => {
      const sessionId = `cs_test_bench_${crypto.randomBytes(16).toString('hex')}`
      const { subscriptionId, paymentId } = await insertPendingPayment(controlPlane.db, payments.db, s.catalogue.current(), { provider: 'card', amountMinor: AMOUNT_MINOR, providerReference: sessionId })
      const created = Math.floor(Date.now() / 1000)
      const session: FakeSession = {
        id: sessionId,
        object: 'checkout.session',
        amount_subtotal: AMOUNT_MINOR,
        amount_total: AMOUNT_MINOR,
        cancel_url: 'https://example.test/c',
        client_reference_id: paymentId,
        created,
        currency: 'usd',
        expires_at: created + 1_800,
        livemode: false,
        metadata: { payment_id: paymentId },
        mode: 'payment',
        payment_intent: `pi_bench_${crypto.randomBytes(12).toString('hex')}`,
        payment_status: 'paid',
        status: 'complete',
        success_url: 'https://example.test/r',
        url: null,
      }
      return { subscriptionId, paymentId, session }
    }
    const deliveryOf = (p: Prepared) => {
      const d = signedDelivery(p.session, 'checkout.session.completed', { secret: s.webhookSecret, timestamp: Math.floor(Date.now() / 1000) })
      return { payload: d.payload, signature: d.signature }
    }
    const checkPosts = (posts: WebhookPost[]): void => {
      const bad = posts.find((p) => p.status !== 200 || p.outcome !== 'completed')
      if (bad) throw new Error(`a webhook was answered ${bad.status} ${bad.outcome}, not 200 completed`)
    }
    const activeQuery = controlPlane
      .db('subscriptions as s')
      .join('nodes as n', 'n.subscription_id', 's.id')
      .join('workflow_runs as w', (j) => j.on('w.workflow_key', '=', controlPlane.db.raw('cast(n.id as varchar(255))')).andOnVal('w.workflow_name', '=', 'provision'))
      .where('s.status', 'active')
    /** Polls until the subscription is active with its provision run; resolves with the time it was seen. */
    const activation = async (subscriptionId: string): Promise<number> => {
      for (;;) {
        if (await activeQuery.clone().where('s.id', subscriptionId).first('w.id')) return clock()
        await new Promise((r) => setTimeout(r, POLL_MS))
      }
    }

    // One at a time (5 warm-ups first: JIT, pools, the gRPC channel).
    const one = async (): Promise<{ p: Prepared; post: WebhookPost; seenAt: number }> => {
      const p = await prepare()
      const [posts, seenAt] = await Promise.all([poster!.post({ deliveries: [deliveryOf(p)], inFlight: 1 }), activation(p.subscriptionId)])
      checkPosts(posts)
      return { p, post: posts[0] as WebhookPost, seenAt }
    }
    for (let i = 0; i < 5; i++) await one()
    const singles: Array<Awaited<ReturnType<typeof one>>> = []
    for (let i = 0; i < s.latencyRuns; i++) singles.push(await one())
    const latencies = singles.map((x) => x.seenAt - x.post.postedAt).sort((a, b) => a - b)
    const stages = await stageTimes(controlPlane, payments, singles.map((x) => ({ ...x.p, post: x.post, seenAt: x.seenAt })))
    ctx.log(`${dialect} one at a time, per payment (ms, p50): ${stages.join('; ')}`)

    // GetPayment from this process, on payments the orchestrator confirmed above: the confirmation's round trip alone.
    for (let i = 0; i < 20; i++) await client.getPayment(singles[i % singles.length]!.p.paymentId, null)
    const rpc: number[] = []
    const rpcCalls = Math.max(200, 2 * s.latencyRuns)
    const serverTicksAt = processTicks(paymentService.child.pid as number)
    const clientCpuAt = process.cpuUsage()
    for (let i = 0; i < rpcCalls; i++) {
      const t0 = performance.now()
      await client.getPayment(singles[i % singles.length]!.p.paymentId, null)
      rpc.push(performance.now() - t0)
    }
    const clientCpu = process.cpuUsage(clientCpuAt)
    const serverMs = (processTicks(paymentService.child.pid as number) - serverTicksAt) * MS_PER_TICK
    rpc.sort((a, b) => a - b)
    ctx.log(
      `${dialect} GetPayment over mTLS gRPC from another process, one at a time (${rpcCalls} calls): p50 ${percentile(rpc, 0.5).toFixed(2)} ms, p99 ${percentile(rpc, 0.99).toFixed(2)} ms; CPU per call: payment-service ${(serverMs / rpcCalls).toFixed(2)} ms, the calling process ${((clientCpu.user + clientCpu.system) / 1000 / rpcCalls).toFixed(2)} ms`,
    )

    // The burst.
    const prepared: Prepared[] = []
    for (let i = 0; i < s.burst; i++) prepared.push(await prepare())
    const deliveries = prepared.map(deliveryOf)
    const runsBefore = await provisionRuns(controlPlane.db)
    const pids = { 'payment-service': paymentService.child.pid as number, orchestrator: orchestrator.child.pid as number, poster: poster.child.pid as number }
    const ticksAt = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processTicks(pid)]))
    const backendsAt = dialect === 'postgres' ? await backendTicks(controlPlane.db) : new Map()
    const machineAt = machineTicks()
    const posting = poster.post({ deliveries, inFlight: BURST_IN_FLIGHT })
    let lastSeenAt = 0
    // CPU of the daemons and the machine at every poll: to read the tail after the last webhook.
    const samples: Array<{ at: number; orchestrator: number; paymentService: number; machine: [number, number] }> = []
    for (;;) {
      samples.push({ at: clock(), orchestrator: processTicks(pids.orchestrator), paymentService: processTicks(pids['payment-service']), machine: machineTicks() })
      if ((await provisionRuns(controlPlane.db)) - runsBefore >= s.burst) {
        lastSeenAt = clock()
        break
      }
      await new Promise((r) => setTimeout(r, BURST_POLL_MS))
    }
    const machine = machineTicks()
    const ticks = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processTicks(pid) - (ticksAt[name] as number)]))
    const backends = dialect === 'postgres' ? await backendTicks(controlPlane.db) : new Map()
    const posts = await posting
    checkPosts(posts)
    const firstPostAt = Math.min(...posts.map((p) => p.postedAt))
    const lastAnsweredAt = Math.max(...posts.map((p) => p.answeredAt))
    const wallMs = lastSeenAt - firstPostAt
    const rate = s.burst / (wallMs / 1000)
    const perPayment = (t: number): string => ((t * MS_PER_TICK) / s.burst).toFixed(2)
    const backendCpu = new Map<string, number>()
    for (const [pid, after] of backends) backendCpu.set(after.app, (backendCpu.get(after.app) ?? 0) + after.ticks - (backendsAt.get(pid)?.ticks ?? 0))
    const webhookMs = posts.map((p) => p.answeredAt - p.postedAt)
    ctx.log(
      `${dialect} burst of ${s.burst}: ${wallMs.toFixed(0)} ms, ${rate.toFixed(0)} payments/s; the last webhook answered at ${(lastAnsweredAt - firstPostAt).toFixed(0)} ms; webhook POST -> 200 p50 ${median(webhookMs).toFixed(1)} ms (${BURST_IN_FLIGHT} in flight)`,
    )
    ctx.log(
      `${dialect} burst CPU per payment (ms): payment-service ${perPayment(ticks['payment-service'] as number)}, orchestrator ${perPayment(ticks.orchestrator as number)}, webhook poster ${perPayment(ticks.poster as number)}${
        dialect === 'postgres' ? `, Postgres backends of the payment service ${perPayment(backendCpu.get('nodeplane-payment-service') ?? 0)}, of the orchestrator ${perPayment(backendCpu.get('nodeplane-orchestrator') ?? 0)}` : ''
      }; the machine ${(((machine[0] - machineAt[0]) / Math.max(1, machine[1] - machineAt[1])) * 100).toFixed(0)}% busy`,
    )
    // The tail: once every webhook was answered, the orchestrator alone works off its backlog.
    const from = samples.find((x) => x.at >= lastAnsweredAt)
    const to = samples.at(-1)
    if (from && to && to.at > from.at) {
      const rows = (await controlPlane.db('subscriptions').whereIn('payment_id', prepared.map((p) => p.paymentId)).select('activated_at')) as Array<{ activated_at: unknown }>
      const tailed = rows.filter((r) => epochMs(r.activated_at) >= lastAnsweredAt).length
      const tailMs = to.at - from.at
      const share = (ticks: number): string => `${(((ticks * MS_PER_TICK) / tailMs) * 100).toFixed(0)}%`
      ctx.log(
        `${dialect} burst tail, after the last webhook answered: ${tailed} activations in ${tailMs.toFixed(0)} ms; the orchestrator ${share(to.orchestrator - from.orchestrator)} of a core, the payment service ${share(to.paymentService - from.paymentService)}, the machine ${(((to.machine[0] - from.machine[0]) / Math.max(1, to.machine[1] - from.machine[1])) * 100).toFixed(0)}% busy`,
      )
    }
    const burstStages = await stageTimes(
      controlPlane,
      payments,
      prepared.map((p, i) => ({ ...p, post: posts[i] as WebhookPost })),
    )
    ctx.log(`${dialect} burst, per payment (ms, p50): ${burstStages.join('; ')}`)

    const expected = 5 + s.latencyRuns + s.burst
    if ((await provisionRuns(controlPlane.db)) !== expected) throw new Error(`${await provisionRuns(controlPlane.db)} provision runs started, expected ${expected}`)
    const p50 = percentile(latencies, 0.5)
    const p99 = percentile(latencies, 0.99)
    ctx.log(`${dialect}: webhook POST -> provisioning started p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms; burst of ${s.burst}: ${rate.toFixed(0)} payments/s`)
    const setup = `payment-service and orchestrator processes (${dialect}, NATS), card webhooks from another process, payment consumer at its default concurrency, GetPayment confirmation over mTLS gRPC`
    return [
      figure({
        name: `card webhook -> provision workflow started through the daemons, one at a time (${dialect}); p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms (bare p50 ${s.bare.p50.toFixed(2)} ms, p99 ${s.bare.p99.toFixed(2)} ms)`,
        baseline: 'bare JetStream publish -> consume round trip, p50 (ratio = bare p50 / ours)',
        unit: 'inverse ms',
        value: 1 / p50,
        baselineValue: 1 / s.bare.p50,
        notes: `${s.latencyRuns} payments; ${setup}; the end seen by polling the control-plane database every ${POLL_MS} ms`,
      }),
      figure({
        name: `card webhook -> provision workflow started through the daemons, burst of ${s.burst} (${dialect})`,
        baseline: 'bare JetStream round trips, same burst size',
        unit: 'payments/s',
        value: rate,
        baselineValue: s.bare.rate,
        ...(dialect === 'postgres' ? { aim: '>= 1,000 payments/s (issue 21)' } : {}),
        notes: `${setup}; ${BURST_IN_FLIGHT} webhooks in flight; first POST to the last activation seen (polled every ${BURST_POLL_MS} ms); the log gives CPU per payment of each process`,
      }),
    ]
  } finally {
    client?.close()
    await poster?.stop()
    for (const daemon of daemons.reverse()) await daemon.stop()
    await controlPlane.drop()
    await payments.drop()
  }
}

async function provisionRuns(db: Db): Promise<number> {
  const rows = (await db('workflow_runs').where({ workflow_name: 'provision' }).count({ n: '*' })) as Array<{ n: number | string }>
  return Number(rows[0]?.n ?? 0)
}

/**
 * Medians of each stage by the rows' own clocks (one machine): the webhook's POST (the poster),
 * the payment's completed_at (the payment service, in the webhook's transaction), its outbox
 * row's published_at (the relay, after the PubAck), the subscription's activated_at (the
 * orchestrator, in its transaction, after the confirmation), and the poll that saw it.
 */
async function stageTimes(
  controlPlane: BenchDatabase,
  payments: BenchDatabase,
  runs: Array<Prepared & { post: WebhookPost; seenAt?: number }>,
): Promise<string[]> {
  const ids = runs.map((r) => r.paymentId)
  const completed = new Map<string, number>()
  for (const row of (await payments.db('payments').whereIn('id', ids).select('id', 'completed_at')) as Array<{ id: string; completed_at: unknown }>) completed.set(row.id, epochMs(row.completed_at))
  const published = new Map<string, number>()
  const outbox = (await payments.db('outbox').where({ subject: 'payment.completed' }).select('payload', 'published_at')) as Array<{ payload: unknown; published_at: unknown }>
  for (const row of outbox) {
    const payload = (typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload) as { payment_id: string }
    if (row.published_at !== null) published.set(payload.payment_id, epochMs(row.published_at))
  }
  const activated = new Map<string, number>()
  const subs = (await controlPlane.db('subscriptions').whereIn('payment_id', ids).select('payment_id', 'activated_at')) as Array<{ payment_id: string; activated_at: unknown }>
  for (const row of subs) activated.set(row.payment_id, epochMs(row.activated_at))
  const gap = (name: string, pick: (r: (typeof runs)[number]) => number | undefined): string => {
    const values = runs.map(pick).filter((v): v is number => v !== undefined && Number.isFinite(v))
    return `${name} ${median(values).toFixed(1)}`
  }
  const lines = [
    gap('POST -> 200', (r) => r.post.answeredAt - r.post.postedAt),
    gap('POST -> payment completed', (r) => (completed.get(r.paymentId) as number) - r.post.postedAt),
    gap('completed -> outbox published', (r) => (published.get(r.paymentId) as number) - (completed.get(r.paymentId) as number)),
    gap('published -> subscription activated', (r) => (activated.get(r.paymentId) as number) - (published.get(r.paymentId) as number)),
  ]
  if (runs.some((r) => r.seenAt !== undefined)) lines.push(gap('activated -> seen', (r) => (r.seenAt === undefined ? undefined : r.seenAt - (activated.get(r.paymentId) as number))))
  if (runs.every((r) => r.seenAt === undefined)) {
    // A burst: when each stage started and ended, in ms from the first POST.
    const first = Math.min(...runs.map((r) => r.post.postedAt))
    const window = (name: string, values: number[]): string => `${name} ${(Math.min(...values) - first).toFixed(0)}-${(Math.max(...values) - first).toFixed(0)}`
    lines.push(
      `windows (ms from the first POST): ${[
        window('POSTs', runs.map((r) => r.post.postedAt)),
        window('completions', runs.map((r) => completed.get(r.paymentId) as number)),
        window('publications', runs.map((r) => published.get(r.paymentId) as number)),
        window('activations', runs.map((r) => activated.get(r.paymentId) as number)),
      ].join(', ')}`,
    )
  }
  return lines
}
