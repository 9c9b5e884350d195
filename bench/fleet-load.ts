/**
 * A rollout under fleet load (issue 9, "Load"), on Postgres as production runs it: 1,000 nodes
 * upgraded by a `rolling` rollout (batches of 100) while 20,000 other simulated agents heartbeat
 * at the production interval (15 s) through the same two agent-gateways, each gateway with its
 * own database pool as its own daemon would have.
 *
 * Baseline, same run: the same rollout over the same 1,000 agents through the same two gateways
 * before the 20,000 connect (1.0.0 -> 1.1.0 quiet, then 1.1.0 -> 1.0.0 under load; the simulated
 * agents do the same work either way). Ratio = quiet wall / loaded wall. Also reported: the
 * stalest heartbeat among the 20,000 sampled every second during the loaded rollout (a gateway
 * that fell behind shows here first) and streams that broke.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import * as grpc from '@grpc/grpc-js'
import { AgentGateway } from '../src/agent-gateway/gateway.js'
import { agentGatewayService, agentMetadata } from '../src/agent-gateway/grpc.js'
import { ensureDevCertificates, readTlsMaterial } from '../src/agent-gateway/tls.js'
import { defaultConfigDir, loadChainCatalogue } from '../src/config/chains.js'
import { toDate } from '../src/db/dialect.js'
import { createDatabase, type Db } from '../src/db/knex.js'
import { createLogger } from '../src/log.js'
import { evaluateHeartbeats, HEARTBEAT_TIMEOUT_MS } from '../src/health/heartbeat-evaluation.js'
import { requireRollout } from '../src/rollouts/store.js'
import { benchDatabase } from './databases.js'
import { INSERT_CHUNK, insertFleet } from './fleet.js'
import { figure, type Bench } from './lib.js'
import {
  BATCH,
  FLEET,
  GATEWAY_COMMAND_POLL_MS,
  HEARTBEAT_FLUSH_MS,
  HEARTBEAT_MS,
  SOURCE,
  SimulatedAgent,
  TARGET,
  issueTokens,
  measured,
  rollout,
  until,
  type AgentStream,
  type Tls,
} from './rollouts.js'

const BYSTANDERS = 20_000
const BYSTANDER_VERSION = '0.9.0'
/** The production heartbeat interval (AGENT_HEARTBEAT_INTERVAL). */
const BYSTANDER_HEARTBEAT_MS = 15_000
const CHANNELS_PER_GATEWAY = 12
const logger = createLogger({ level: 'silent' })

/**
 * Watches a knex pool: connections in use, the longest queue of callers waiting for one, and the
 * statements run (by their first words), so a starved pool says which pool and what holds it.
 */
/** The gateways' warnings and errors (a failed flush, a stream it could not set up), counted by message. */
class GatewayLog {
  readonly counts = new Map<string, number>()
  readonly logger = createLogger({
    level: 'warn',
    destination: new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        for (const line of chunk.toString('utf8').split('\n')) {
          if (!line) continue
          let key = line.slice(0, 80)
          try {
            const entry = JSON.parse(line) as { msg?: string; err?: { message?: string } }
            key = `${entry.msg ?? '?'}${entry.err?.message ? `: ${entry.err.message.slice(0, 80)}` : ''}`
          } catch {
            // not JSON: counted by its start
          }
          this.counts.set(key, (this.counts.get(key) ?? 0) + 1)
        }
        done()
      },
    }),
  })
  summary(): string {
    const total = [...this.counts.values()].reduce((a, b) => a + b, 0)
    return total === 0 ? 'none' : `${total} (${[...this.counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([k, n]) => `${n}× ${k}`).join('; ')})`
  }
}

class PoolWatch {
  maxPending = 0
  maxUsed = 0
  /** The longest wait queue since the last mark() (phases, unlike take(), which the trace also calls). */
  phaseMaxPending = 0
  queries = new Map<string, number>()
  private readonly timer: NodeJS.Timeout
  constructor(readonly name: string, db: Db) {
    const pool = (db.client as { pool?: { numUsed(): number; numPendingAcquires(): number } }).pool
    this.timer = setInterval(() => {
      const p = (db.client as { pool?: typeof pool }).pool ?? pool
      if (!p) return
      this.maxPending = Math.max(this.maxPending, p.numPendingAcquires())
      this.phaseMaxPending = Math.max(this.phaseMaxPending, this.maxPending)
      this.maxUsed = Math.max(this.maxUsed, p.numUsed())
    }, 50)
    this.timer.unref()
    db.on('query', (q: { sql?: string }) => {
      const key = (q.sql ?? '').replace(/\s+/g, ' ').slice(0, 70)
      this.queries.set(key, (this.queries.get(key) ?? 0) + 1)
    })
  }
  /** One line since the last call; resets the counters. */
  take(): string {
    const top = [...this.queries.entries()].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([k, n]) => `${n}× ${k}`).join('; ')
    const line = `${this.name}: used max ${this.maxUsed}, waiting max ${this.maxPending}; ${[...this.queries.values()].reduce((a, b) => a + b, 0)} queries (${top})`
    this.maxPending = 0
    this.maxUsed = 0
    this.queries.clear()
    return line
  }
  mark(): number {
    const max = this.phaseMaxPending
    this.phaseMaxPending = 0
    return max
  }
  stop(): void {
    clearInterval(this.timer)
  }
}

type Channel = grpc.Client & { Connect(m: grpc.Metadata): AgentStream }

export const benchFleetLoad: Bench = async (ctx) => {
  const catalogue = await loadChainCatalogue(defaultConfigDir())
  const releases = catalogue.profiles.get('devnet')?.releases ?? []
  const forward = releases.find((r) => r.version === TARGET)
  const back = releases.find((r) => r.version === SOURCE)
  if (!forward || !back) throw new Error(`devnet ${SOURCE} and ${TARGET} must both be in the chain catalogue`)
  const fleet = Math.max(BATCH, Math.round(FLEET * ctx.scale))
  const bystanders = Math.max(1_000, Math.round(BYSTANDERS * ctx.scale))
  const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-tls-'))
  const tls: Tls = readTlsMaterial(ensureDevCertificates(tlsDir))
  const { db, url, drop } = await benchDatabase('postgres', ctx.postgresUrl)
  const gatewayDbs = [createDatabase(url), createDatabase(url)]
  const gateways: AgentGateway[] = []
  const channels: Channel[] = []
  const agents: SimulatedAgent[] = []
  const tickers: NodeJS.Timeout[] = []
  const gatewayLog = new GatewayLog()
  /** Receive-to-commit latencies of heartbeats while it is set (the loaded rollout). */
  let ingest: number[] | undefined
  let sampling = false
  let sampler: Promise<void> = Promise.resolve()
  const watches = [new PoolWatch('worker+sampler pool', db), new PoolWatch('gateway A pool', gatewayDbs[0]!), new PoolWatch('gateway B pool', gatewayDbs[1]!)]
  /** Per phase: the longest queue for a connection, in the worker's pool and the gateways' (the larger). */
  const waits = new Map<string, { worker: number; gateway: number }>()
  const report = (phase: string) => {
    for (const w of watches) ctx.log(`  [${phase}] ${w.take()}`)
    ctx.log(`  [${phase}] gateway warnings so far: ${gatewayLog.summary()}`)
    if (phase !== '10 s') {
      const [worker, a, b] = watches.map((w) => w.mark())
      waits.set(phase, { worker: worker!, gateway: Math.max(a!, b!) })
    }
  }
  // The bystanders connect this many at a time (the bench's default 500; FLEET_LOAD_CONNECT_CHUNK=20000 is a reconnect storm).
  const connectChunk = Number(process.env.FLEET_LOAD_CONNECT_CHUNK ?? '500')
  // FLEET_LOAD_TRACE=1: the pools every 10 s as well (to see a starvation as it builds).
  if (process.env.FLEET_LOAD_TRACE) tickers.push(setInterval(() => report('10 s'), 10_000))
  try {
    ctx.log(`creating ${fleet} nodes on ${SOURCE} and ${bystanders} bystanders on ${BYSTANDER_VERSION}`)
    const nodeIds = await insertFleet(db, fleet, new Date(Date.now() - 3_600_000))
    const bystanderIds = await insertFleet(db, bystanders, new Date(Date.now() - 3_600_000))
    await configState(db, nodeIds, SOURCE)
    await configState(db, bystanderIds, BYSTANDER_VERSION)
    const bystanderUser = ((await db('subscriptions').join('nodes', 'nodes.subscription_id', 'subscriptions.id').where('nodes.id', bystanderIds[0]).first('subscriptions.user_id')) as { user_id: string }).user_id
    const operatorId = crypto.randomUUID()
    await db('users').insert({ id: operatorId, email: `${operatorId}@bench.test`, is_admin: true, created_at: new Date(), updated_at: new Date() })

    for (const gatewayDb of gatewayDbs) {
      const gateway = new AgentGateway({
        db: gatewayDb,
        logger: gatewayLog.logger,
        heartbeatIntervalSeconds: 15,
        progressCheckIntervalSeconds: 30,
        heartbeatFlushIntervalMs: HEARTBEAT_FLUSH_MS,
        commandPollIntervalMs: GATEWAY_COMMAND_POLL_MS,
        onHeartbeatsFlushed: (ms) => {
          if (!ingest) return
          for (const v of ms) ingest.push(v)
        },
      })
      const port = await gateway.listen('127.0.0.1', 0, grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
      gateways.push(gateway)
      const Service = agentGatewayService()
      for (let c = 0; c < CHANNELS_PER_GATEWAY; c++) channels.push(new Service(`127.0.0.1:${port}`, grpc.credentials.createSsl(tls.ca)) as unknown as Channel)
    }
    // Agents alternate between the gateways; each gateway's channels share its agents.
    const connect = async (ids: string[]): Promise<SimulatedAgent[]> => {
      const tokens = await issueTokens(db, ids)
      const out: SimulatedAgent[] = []
      for (let i = 0; i < tokens.length; i += connectChunk) {
        out.push(
          ...(await Promise.all(
            tokens.slice(i, i + connectChunk).map(({ nodeId, token }, j) => {
              const gateway = (i + j) % 2
              const channel = channels[gateway * CHANNELS_PER_GATEWAY + ((i + j) % CHANNELS_PER_GATEWAY)]!
              const stream = channel.Connect(agentMetadata(nodeId, token))
              return new Promise<SimulatedAgent>((resolve, reject) => {
                stream.once('metadata', () => resolve(new SimulatedAgent(nodeId, stream)))
                stream.once('error', reject)
              })
            }),
          )),
        )
      }
      return out
    }
    // Each agent every intervalMs, spread evenly; a late tick (a busy event loop) sends what fell
    // due meanwhile, so the agents keep their interval instead of slowing down with the machine.
    const heartbeatEvery = (group: SimulatedAgent[], intervalMs: number): void => {
      const started = performance.now()
      let sent = 0
      tickers.push(setInterval(() => {
        const due = Math.floor(((performance.now() - started) * group.length) / intervalMs)
        for (; sent < due; sent++) group[sent % group.length]!.heartbeat()
      }, 20))
    }
    const heartbeated = async (count: number) => Number((await db('agent_status').count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) >= count

    report('setup')
    ctx.log(`connecting ${fleet} upgrade agents through two gateways`)
    const upgraders = await connect(nodeIds)
    agents.push(...upgraders)
    heartbeatEvery(upgraders, HEARTBEAT_MS)
    await until(() => heartbeated(fleet), 'every upgrade agent to heartbeat', 30_000)

    report('connect upgraders')
    ctx.log(`quiet rollout ${SOURCE} -> ${TARGET} of ${fleet} nodes`)
    const quiet = await measured(() => explained(db, rollout({ db, catalogue, target: forward }, operatorId, SOURCE)))
    await expectCompleted(db, quiet.result.rolloutId, fleet)
    // The upgraded nodes are `syncing`; one heartbeat evaluation (as the health-evaluator runs it)
    // moves the synced ones back to healthy, where the next rollout may take them.
    await until(async () => {
      await evaluateHeartbeats(db, { now: new Date(), heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS, intervalMs: 15_000, logger })
      return Number((await db('nodes').whereNot({ state: 'healthy' }).count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) === 0
    }, 'the upgraded nodes to be healthy again', 30_000, 500)

    report('quiet rollout')
    ctx.log(`connecting ${bystanders} bystander agents (heartbeat every ${BYSTANDER_HEARTBEAT_MS / 1_000} s)`)
    const connectStarted = performance.now()
    const others = await connect(bystanderIds)
    const connectMs = performance.now() - connectStarted
    for (const a of others) a.version = BYSTANDER_VERSION
    agents.push(...others)
    heartbeatEvery(others, BYSTANDER_HEARTBEAT_MS)
    await until(() => heartbeated(fleet + bystanders), 'every bystander to heartbeat', BYSTANDER_HEARTBEAT_MS * 3, 500)

    report('connect bystanders')
    ctx.log(`${bystanders} bystanders connected in ${(connectMs / 1_000).toFixed(1)} s, all heartbeated ${((performance.now() - connectStarted) / 1_000).toFixed(1)} s after the first connected`)
    ctx.log(`rollout ${TARGET} -> ${SOURCE} of ${fleet} nodes under the load`)
    let stalest = 0
    const samplerErrors: string[] = []
    ingest = []
    sampling = true
    sampler = (async () => {
      while (sampling) {
        try {
          const row = (await db('nodes').join('subscriptions', 'subscriptions.id', 'nodes.subscription_id').where('subscriptions.user_id', bystanderUser).min({ oldest: 'nodes.last_heartbeat' }).first()) as { oldest: unknown }
          if (row?.oldest) stalest = Math.max(stalest, Date.now() - toDate(row.oldest).getTime())
        } catch (err) {
          // A starved pool is a finding, not a reason to lose the run.
          samplerErrors.push(String(err))
        }
        await new Promise((resolve) => setTimeout(resolve, 1_000))
      }
    })()
    const loaded = await measured(() => explained(db, rollout({ db, catalogue, target: back }, operatorId, TARGET)))
    sampling = false
    await sampler
    const latencies = Float64Array.from(ingest).sort()
    ingest = undefined
    const ingestP99 = latencies[Math.floor(latencies.length * 0.99)] ?? 0
    const ingestMax = latencies[latencies.length - 1] ?? 0
    report('loaded rollout')
    await expectCompleted(db, loaded.result.rolloutId, fleet)

    const streamErrors = agents.reduce((n, a) => n + a.streamErrors, 0)
    const offered = fleet * (1_000 / HEARTBEAT_MS) + bystanders * (1_000 / BYSTANDER_HEARTBEAT_MS)
    ctx.log(`quiet ${(quiet.ms / 1_000).toFixed(2)} s, loaded ${(loaded.ms / 1_000).toFixed(2)} s (cpu ${loaded.cpuPercent.toFixed(0)}%, loop p99 ${loaded.loopP99Ms.toFixed(0)} ms); stalest bystander heartbeat ${(stalest / 1_000).toFixed(1)} s; stream errors ${streamErrors}; sampler errors ${samplerErrors.length}${samplerErrors[0] ? ` (${samplerErrors[0]})` : ''}; heartbeat receive-to-commit p99 ${ingestP99.toFixed(0)} ms, max ${ingestMax.toFixed(0)} ms over ${latencies.length}; gateway warnings ${gatewayLog.summary()}`)
    return [
      figure({
        name: `rolling rollout of ${fleet} nodes while ${bystanders} more agents heartbeat every ${BYSTANDER_HEARTBEAT_MS / 1_000} s through two gateways (postgres); ${(loaded.ms / 1_000).toFixed(1)} s; stalest bystander heartbeat ${(stalest / 1_000).toFixed(1)} s; broken streams ${streamErrors}`,
        baseline: `the same rollout, same agents and gateways, before the ${bystanders} connected: ${(quiet.ms / 1_000).toFixed(1)} s`,
        unit: 'nodes/s',
        value: fleet / (loaded.ms / 1_000),
        baselineValue: fleet / (quiet.ms / 1_000),
        aim: `stalest heartbeat < ${(2 * BYSTANDER_HEARTBEAT_MS) / 1_000} s`,
        notes:
          `about ${Math.round(offered)} heartbeats/s offered during the loaded rollout; gateways, worker, ${fleet + bystanders} agents and Postgres share 2 cores. ` +
          `The ${bystanders} connected ${connectChunk} at a time in ${(connectMs / 1_000).toFixed(1)} s. Longest queue for a pool connection (pool of 10): ` +
          `${[...waits.entries()].filter(([phase]) => phase !== 'setup').map(([phase, w]) => `${phase}: gateway ${w.gateway}, worker ${w.worker}`).join('; ')}; ` +
          `heartbeat receive-to-commit during the loaded rollout p99 ${ingestP99.toFixed(0)} ms, max ${ingestMax.toFixed(0)} ms; gateway warnings ${gatewayLog.summary()}; sampler errors ${samplerErrors.length}`,
      }),
    ]
  } finally {
    // A failed rollout must not leave the sampler querying a destroyed pool forever.
    sampling = false
    await sampler
    if (ingest) {
      const l = Float64Array.from(ingest).sort()
      ctx.log(`(failed run) heartbeat receive-to-commit during the loaded rollout: p99 ${(l[Math.floor(l.length * 0.99)] ?? 0).toFixed(0)} ms, max ${(l[l.length - 1] ?? 0).toFixed(0)} ms over ${l.length}`)
    }
    for (const w of watches) w.stop()
    for (const t of tickers) clearInterval(t)
    for (const a of agents) a.end()
    await Promise.all(gateways.map((g) => g.close(1_000)))
    for (const c of channels) c.close()
    await Promise.all(gatewayDbs.map((d) => d.destroy()))
    await drop()
    fs.rmSync(tlsDir, { recursive: true, force: true })
  }
}

async function configState(db: Db, nodeIds: string[], version: string): Promise<void> {
  for (let i = 0; i < nodeIds.length; i += INSERT_CHUNK) {
    await db('node_config_state').insert(nodeIds.slice(i, i + INSERT_CHUNK).map((node_id) => ({ node_id, binary_version: version, config_version: null, updated_at: new Date() })))
  }
}

/** A rollout that did not complete says why its nodes failed. */
async function explained<T>(db: Db, run: Promise<T>): Promise<T> {
  try {
    return await run
  } catch (err) {
    const rows = (await db('rollout_nodes').where({ status: 'failed' }).select('error_message')) as { error_message: string | null }[]
    const reasons = new Map<string, number>()
    for (const r of rows) reasons.set(r.error_message ?? '?', (reasons.get(r.error_message ?? '?') ?? 0) + 1)
    const why = [...reasons.entries()].map(([m, n]) => `${n}× ${m}`).join('; ')
    throw new Error(`${err instanceof Error ? err.message : String(err)}; failed nodes: ${why}`)
  }
}

async function expectCompleted(db: Db, rolloutId: string, fleet: number): Promise<void> {
  const r = await requireRollout(db, rolloutId)
  if (r.status !== 'completed' || r.succeeded_nodes !== fleet || r.total_nodes !== fleet) {
    throw new Error(`rollout ${rolloutId} ended ${r.status}: ${r.succeeded_nodes} of ${r.total_nodes} succeeded, fleet ${fleet}`)
  }
}
