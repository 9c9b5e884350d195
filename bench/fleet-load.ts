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
import * as grpc from '@grpc/grpc-js'
import { AgentGateway } from '../src/agents/gateway.js'
import { agentGatewayService, agentMetadata } from '../src/agents/grpc.js'
import { ensureDevCertificates, readTlsMaterial } from '../src/agents/tls.js'
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
      const gateway = new AgentGateway({ db: gatewayDb, logger, heartbeatIntervalSeconds: 15, progressCheckIntervalSeconds: 30, heartbeatFlushIntervalMs: HEARTBEAT_FLUSH_MS, commandPollIntervalMs: GATEWAY_COMMAND_POLL_MS })
      const port = await gateway.listen('127.0.0.1', 0, grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
      gateways.push(gateway)
      const Service = agentGatewayService()
      for (let c = 0; c < CHANNELS_PER_GATEWAY; c++) channels.push(new Service(`127.0.0.1:${port}`, grpc.credentials.createSsl(tls.ca)) as unknown as Channel)
    }
    // Agents alternate between the gateways; each gateway's channels share its agents.
    const connect = async (ids: string[]): Promise<SimulatedAgent[]> => {
      const tokens = await issueTokens(db, ids)
      const out: SimulatedAgent[] = []
      for (let i = 0; i < tokens.length; i += 500) {
        out.push(
          ...(await Promise.all(
            tokens.slice(i, i + 500).map(({ nodeId, token }, j) => {
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
    const heartbeatEvery = (group: SimulatedAgent[], intervalMs: number): void => {
      const tickMs = 20
      const perTick = Math.ceil((group.length * tickMs) / intervalMs)
      let cursor = 0
      tickers.push(setInterval(() => {
        for (let k = 0; k < perTick; k++) group[cursor++ % group.length]!.heartbeat()
      }, tickMs))
    }
    const heartbeated = async (count: number) => Number((await db('agent_status').count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) >= count

    ctx.log(`connecting ${fleet} upgrade agents through two gateways`)
    const upgraders = await connect(nodeIds)
    agents.push(...upgraders)
    heartbeatEvery(upgraders, HEARTBEAT_MS)
    await until(() => heartbeated(fleet), 'every upgrade agent to heartbeat', 30_000)

    ctx.log(`quiet rollout ${SOURCE} -> ${TARGET} of ${fleet} nodes`)
    const quiet = await measured(() => rollout({ db, catalogue, target: forward }, operatorId, SOURCE))
    await expectCompleted(db, quiet.result.rolloutId, fleet)
    // The upgraded nodes are `syncing`; one heartbeat evaluation (as the health-evaluator runs it)
    // moves the synced ones back to healthy, where the next rollout may take them.
    await until(async () => {
      await evaluateHeartbeats(db, { now: new Date(), heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS, intervalMs: 15_000, logger })
      return Number((await db('nodes').whereNot({ state: 'healthy' }).count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) === 0
    }, 'the upgraded nodes to be healthy again', 30_000, 500)

    ctx.log(`connecting ${bystanders} bystander agents (heartbeat every ${BYSTANDER_HEARTBEAT_MS / 1_000} s)`)
    const others = await connect(bystanderIds)
    for (const a of others) a.version = BYSTANDER_VERSION
    agents.push(...others)
    heartbeatEvery(others, BYSTANDER_HEARTBEAT_MS)
    await until(() => heartbeated(fleet + bystanders), 'every bystander to heartbeat', BYSTANDER_HEARTBEAT_MS * 3, 500)

    ctx.log(`rollout ${TARGET} -> ${SOURCE} of ${fleet} nodes under the load`)
    let stalest = 0
    const samplerErrors: string[] = []
    let sampling = true
    const sampler = (async () => {
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
    const loaded = await measured(() => rollout({ db, catalogue, target: back }, operatorId, TARGET))
    sampling = false
    await sampler
    await expectCompleted(db, loaded.result.rolloutId, fleet)

    const streamErrors = agents.reduce((n, a) => n + a.streamErrors, 0)
    const offered = fleet * (1_000 / HEARTBEAT_MS) + bystanders * (1_000 / BYSTANDER_HEARTBEAT_MS)
    ctx.log(`quiet ${(quiet.ms / 1_000).toFixed(2)} s, loaded ${(loaded.ms / 1_000).toFixed(2)} s (cpu ${loaded.cpuPercent.toFixed(0)}%, loop p99 ${loaded.loopP99Ms.toFixed(0)} ms); stalest bystander heartbeat ${(stalest / 1_000).toFixed(1)} s; stream errors ${streamErrors}; sampler errors ${samplerErrors.length}${samplerErrors[0] ? ` (${samplerErrors[0]})` : ''}`)
    return [
      figure({
        name: `rolling rollout of ${fleet} nodes while ${bystanders} more agents heartbeat every ${BYSTANDER_HEARTBEAT_MS / 1_000} s through two gateways (postgres); ${(loaded.ms / 1_000).toFixed(1)} s; stalest bystander heartbeat ${(stalest / 1_000).toFixed(1)} s; broken streams ${streamErrors}`,
        baseline: `the same rollout, same agents and gateways, before the ${bystanders} connected: ${(quiet.ms / 1_000).toFixed(1)} s`,
        unit: 'nodes/s',
        value: fleet / (loaded.ms / 1_000),
        baselineValue: fleet / (quiet.ms / 1_000),
        aim: `stalest heartbeat < ${(2 * BYSTANDER_HEARTBEAT_MS) / 1_000} s`,
        notes: `about ${Math.round(offered)} heartbeats/s offered during the loaded rollout; gateways, worker, ${fleet + bystanders} agents and Postgres share 2 cores`,
      }),
    ]
  } finally {
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

async function expectCompleted(db: Db, rolloutId: string, fleet: number): Promise<void> {
  const r = await requireRollout(db, rolloutId)
  if (r.status !== 'completed' || r.succeeded_nodes !== fleet || r.total_nodes !== fleet) {
    throw new Error(`rollout ${rolloutId} ended ${r.status}: ${r.succeeded_nodes} of ${r.total_nodes} succeeded, fleet ${fleet}`)
  }
}
