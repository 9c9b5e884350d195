/**
 * A rolling upgrade of a simulated fleet (issue 8, "Benchmark"), on each database.
 *
 * 1,000 nodes (BENCH_SCALE scales it, at least 100), each with one simulated agent holding an
 * authenticated stream over gRPC/TLS to a real AgentGateway (as bench/heartbeats.ts). Every agent
 * heartbeats every 500 ms (its binary_version, process running, chain synced) and answers an
 * `upgrade` command as the real agent does: ack, one progress report per upgrade action (the
 * spec's phases), 50 ms of simulated work in all, completed with a valid upgrade result, then
 * reports the new binary_version in its heartbeats.
 *
 * Measured: a `rolling` rollout 1.0.0 -> 1.1.0, batch_size 100, health_wait_duration 1 s, driven
 * by a real workflow worker running the `rollout` workflow with the orchestrator's production
 * settings (250 ms command/validation polls, 1 s workflow poll; the gateway's 250 ms command
 * delivery poll, 25 ms heartbeat flush); wall time from startRollout to the rollout's completed_at.
 *
 * Baseline, same run, same agents, same gateway: the upgrade commands sent directly through the
 * gateway with no workflow: per batch of 100, enqueue the commands, wait for every completion
 * (a 25 ms poll), then the same 1 s health wait. Figure: nodes/s of each, ratio = baseline wall
 * time / rollout wall time; overhead per node = (rollout wall - baseline wall) / nodes. The notes
 * and the log split one node's rollout time into its parts (from the rows the run wrote).
 *
 * On SQLite the gateway and the orchestrator share one connection (as `nodeplane up` does); on
 * Postgres each has its own pool, as separate daemons would. Everything shares the 2 cores.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import * as grpc from '@grpc/grpc-js'
import { enqueueCommand } from '../src/agent-gateway/commands.js'
import { AgentGateway } from '../src/agent-gateway/gateway.js'
import { agentGatewayService, agentMetadata, type AgentMessageOut, type GatewayMessage } from '../src/agent-gateway/grpc.js'
import { PHASE_OF_ACTION, UPGRADE_ACTIONS, parseCommandPayload, type UpgradeResult } from '../src/agent-gateway/protocol.js'
import { ensureDevCertificates, readTlsMaterial } from '../src/agent-gateway/tls.js'
import { AGENT_TOKEN_PREFIX, hashAgentToken } from '../src/agent-gateway/tokens.js'
import { defaultConfigDir, loadChainCatalogue, type ChainCatalogue } from '../src/config/chains.js'
import { fromJson, toDate, toDateOrNull } from '../src/db/dialect.js'
import { createDatabase, type Db } from '../src/db/knex.js'
import { createLogger } from '../src/log.js'
import { startRollout } from '../src/rollouts/control.js'
import { registerRolloutWorkflow } from '../src/rollouts/rollout-workflow.js'
import { isTerminalRollout, insertRollout, requireRollout } from '../src/rollouts/store.js'
import { createWorkflowRegistry, createWorkflowWorker } from '../src/workflows/index.js'
import { benchDatabase, type Dialect } from './databases.js'
import { INSERT_CHUNK, insertFleet } from './fleet.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

export const FLEET = 1_000
export const BATCH = 100
const WORK_MS = 50
const HEALTH_WAIT_MS = 1_000
export const HEARTBEAT_MS = 500
export const SOURCE = '1.0.0'
export const TARGET = '1.1.0'
/** The orchestrator's and the gateway's production settings (daemons/orchestrator.ts, src/config/env.ts). */
const ORCHESTRATOR_POLL_MS = 250
const WORKFLOW_POLL_MS = 1_000
const WORKFLOW_CONCURRENCY = 16
const COMMAND_TIMEOUT_MS = 600_000
export const GATEWAY_COMMAND_POLL_MS = 250
export const HEARTBEAT_FLUSH_MS = 25
const logger = createLogger({ level: 'silent' })

export type AgentStream = grpc.ClientDuplexStream<AgentMessageOut, GatewayMessage>
export type Tls = { ca: Buffer; cert: Buffer; key: Buffer }

export const benchRollouts: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const catalogue = await loadChainCatalogue(defaultConfigDir())
  const target = catalogue.profiles.get('devnet')?.releases.find((r) => r.version === TARGET)
  if (!target) throw new Error(`devnet ${TARGET} is not in the chain catalogue`)
  const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-tls-'))
  const tls = readTlsMaterial(ensureDevCertificates(tlsDir))
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const { db, url, drop } = await benchDatabase(dialect, ctx.postgresUrl)
      // Postgres: the gateway's own pool, as its own daemon would have.
      const gatewayDb = dialect === 'postgres' ? createDatabase(url) : db
      try {
        const fleet = Math.max(BATCH, Math.round(FLEET * ctx.scale))
        figures.push(...await rollingUpgrade({ db, gatewayDb, dialect, fleet, tls, catalogue, target, log: ctx.log }))
      } finally {
        if (gatewayDb !== db) await gatewayDb.destroy()
        await drop()
      }
    }
  } finally {
    fs.rmSync(tlsDir, { recursive: true, force: true })
  }
  return figures
}

/** One simulated node agent: heartbeats on demand, answers upgrade commands. */
export class SimulatedAgent {
  version = SOURCE
  upgrades = 0
  streamErrors = 0
  private readonly seen = new Set<string>()

  constructor(
    readonly nodeId: string,
    private readonly stream: AgentStream,
  ) {
    stream.on('data', (message: GatewayMessage) => this.onMessage(message))
    // Counted: a stream that breaks during the run is reported (each end closes them on purpose).
    stream.on('error', () => {
      this.streamErrors += 1
    })
  }

  heartbeat(): void {
    this.stream.write({
      heartbeat: {
        sent_at_unix_ms: Date.now(),
        agent_version: '0.1.0',
        binary_version: this.version,
        running_command_ids: [],
        sync_status: 'synced',
        metrics: { block_height: 1_234_567, peer_count: 12, rpc_latency_ms: 3, rpc_up: 1 },
        process_state: 'running',
        restarts_in_window: 0,
      },
    })
  }

  end(): void {
    this.stream.end()
  }

  private onMessage(message: GatewayMessage): void {
    if (message.body !== 'command') return
    const { command_id: id, type, payload_json: json } = message.command
    if (this.seen.has(id)) return
    this.seen.add(id)
    if (type !== 'upgrade') {
      this.stream.write({ failed: { command_id: id, error: `the simulated agent only upgrades, not ${type}`, result_json: '' } })
      return
    }
    const payload = parseCommandPayload('upgrade', JSON.parse(json) as unknown)
    this.stream.write({ ack: { command_id: id } })
    const previous = this.version
    const perAction = WORK_MS / UPGRADE_ACTIONS.length
    let next = 0
    const act = (): void => {
      const action = UPGRADE_ACTIONS[next++]
      if (action) {
        this.stream.write({ progress: { command_id: id, phase: PHASE_OF_ACTION[action], message: action, stall_count: 0, stalled: false } })
        setTimeout(act, perAction)
        return
      }
      this.version = payload.artifact.version
      this.upgrades += 1
      const result: UpgradeResult = { version: this.version, previous_version: previous, phase: 'starting', actions_done: [...UPGRADE_ACTIONS], actions_skipped: [], compensated: [] }
      this.stream.write({ completed: { command_id: id, result_json: JSON.stringify(result) } })
    }
    act()
  }
}

export interface Setting {
  db: Db
  gatewayDb: Db
  dialect: Dialect
  fleet: number
  tls: Tls
  catalogue: ChainCatalogue
  target: { version: string; url: string; sha256: string }
  log(line: string): void
}

async function rollingUpgrade(s: Setting): Promise<BenchFigure[]> {
  const { db, dialect, fleet } = s
  s.log(`${dialect}: creating ${fleet} nodes on ${SOURCE}`)
  const nodeIds = await insertFleet(db, fleet, new Date(Date.now() - 3_600_000))
  for (let i = 0; i < nodeIds.length; i += INSERT_CHUNK) {
    await db('node_config_state').insert(nodeIds.slice(i, i + INSERT_CHUNK).map((node_id) => ({ node_id, binary_version: SOURCE, config_version: null, updated_at: new Date() })))
  }
  const operatorId = crypto.randomUUID()
  await db('users').insert({ id: operatorId, email: `${operatorId}@bench.test`, is_admin: true, created_at: new Date(), updated_at: new Date() })
  const tokens = await issueTokens(db, nodeIds)

  const gateway = new AgentGateway({
    db: s.gatewayDb,
    logger,
    heartbeatIntervalSeconds: 1,
    progressCheckIntervalSeconds: 30,
    heartbeatFlushIntervalMs: HEARTBEAT_FLUSH_MS,
    commandPollIntervalMs: GATEWAY_COMMAND_POLL_MS,
  })
  const port = await gateway.listen('127.0.0.1', 0, grpc.ServerCredentials.createSsl(null, [{ private_key: s.tls.key, cert_chain: s.tls.cert }], false))
  const Service = agentGatewayService()
  const channels = Array.from({ length: 8 }, () => new Service(`127.0.0.1:${port}`, grpc.credentials.createSsl(s.tls.ca)) as unknown as grpc.Client & { Connect(m: grpc.Metadata): AgentStream })
  const agents: SimulatedAgent[] = []
  let ticker: NodeJS.Timeout | undefined
  try {
    s.log(`${dialect}: connecting ${fleet} simulated agents over gRPC/TLS`)
    for (let i = 0; i < tokens.length; i += 200) {
      const opened = await Promise.all(
        tokens.slice(i, i + 200).map(({ nodeId, token }, j) => {
          const stream = channels[(i + j) % channels.length]!.Connect(agentMetadata(nodeId, token))
          return new Promise<SimulatedAgent>((resolve, reject) => {
            stream.once('metadata', () => resolve(new SimulatedAgent(nodeId, stream)))
            stream.once('error', reject)
          })
        }),
      )
      agents.push(...opened)
    }
    // Every agent heartbeats every HEARTBEAT_MS, spread evenly over the interval.
    const tickMs = 20
    const perTick = Math.ceil((agents.length * tickMs) / HEARTBEAT_MS)
    let cursor = 0
    ticker = setInterval(() => {
      for (let k = 0; k < perTick; k++) agents[cursor++ % agents.length]!.heartbeat()
    }, tickMs)
    await until(async () => Number((await db('agent_status').count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) >= fleet, 'every agent to have heartbeated', 30_000)

    const batches: string[][] = []
    const ordered = [...nodeIds].sort()
    for (let i = 0; i < ordered.length; i += BATCH) batches.push(ordered.slice(i, i + BATCH))
    const artifact = { version: s.target.version, url: s.target.url, sha256: s.target.sha256 }

    // Baseline: the same agents, the same gateway, no workflow.
    s.log(`${dialect}: baseline — ${batches.length} batches of upgrade commands straight through the gateway`)
    const base = await measured(() => directUpgrade(db, batches, artifact))
    if (agents.some((a) => a.version !== TARGET)) throw new Error('the baseline did not upgrade every agent')
    for (const a of agents) a.version = SOURCE
    await new Promise((resolve) => setTimeout(resolve, HEARTBEAT_MS * 2))

    s.log(`${dialect}: rolling rollout of ${fleet} nodes, batches of ${BATCH}, health wait ${HEALTH_WAIT_MS} ms`)
    const run = await measured(() => rollout(s, operatorId))
    await verify(db, nodeIds, agents, run.result.rolloutId)
    const parts = await breakdown(db, run.result.rolloutId, run.result.startedAt)

    const wallS = run.ms / 1_000
    const baseS = base.ms / 1_000
    const overheadPerNode = (run.ms - base.ms) / fleet
    const floorS = (batches.length * (WORK_MS + HEALTH_WAIT_MS)) / 1_000
    const overheadVsAgents = (run.ms - floorS * 1_000) / fleet
    const streamErrors = agents.reduce((n, a) => n + a.streamErrors, 0)
    s.log(
      `${dialect}: rollout ${wallS.toFixed(2)} s (cpu ${run.cpuPercent.toFixed(0)}%, loop p99 ${run.loopP99Ms.toFixed(0)} ms), ` +
        `direct ${baseS.toFixed(2)} s (cpu ${base.cpuPercent.toFixed(0)}%, loop p99 ${base.loopP99Ms.toFixed(0)} ms), agents' own ${floorS.toFixed(2)} s; ` +
        `overhead ${overheadPerNode.toFixed(1)} ms/node; stream errors ${streamErrors}`,
    )
    s.log(`${dialect}: per node (mean): ${parts.perNode}`)
    s.log(`${dialect}: per batch (mean): ${parts.perBatch}`)
    const agentsOwn = figure({
      name: `the same rollout (${dialect}) against the agents' own upgrade time: ${wallS.toFixed(1)} s vs ${floorS.toFixed(1)} s`,
      baseline: `the agents' own time: ${batches.length} batches x (${WORK_MS} ms of upgrade work + the ${HEALTH_WAIT_MS / 1_000} s health wait), nothing else (${dialect})`,
      unit: 'nodes/s',
      value: fleet / wallS,
      baselineValue: fleet / floorS,
      notes: `ratio = agents' own time / rollout wall; what is left is the control plane (planning, pre-checks, maintenance, delivery through the database and the gateway, validation polls): ${overheadVsAgents.toFixed(1)} ms/node`,
    })
    return [figure({
      name:
        `rolling rollout of ${fleet} simulated nodes over gRPC/TLS, batches of ${BATCH}, health wait ${HEALTH_WAIT_MS / 1_000} s, ${WORK_MS} ms upgrade work (${dialect}); ` +
        `wall ${wallS.toFixed(1)} s vs ${baseS.toFixed(1)} s direct; control-plane overhead ${overheadPerNode.toFixed(1)} ms/node`,
      baseline: `the same agents upgraded straight through the gateway, no workflow: per batch enqueue ${BATCH} commands, await them, wait ${HEALTH_WAIT_MS / 1_000} s (${dialect})`,
      unit: 'nodes/s',
      value: fleet / wallS,
      baselineValue: fleet / baseS,
      notes:
        `ratio = direct wall / rollout wall; the agents' own time is ${floorS.toFixed(1)} s (${batches.length} x (${WORK_MS} ms + ${HEALTH_WAIT_MS / 1_000} s)). ` +
        `Per node (mean): ${parts.perNode}. Per batch (mean): ${parts.perBatch}. ` +
        `Process CPU ${run.cpuPercent.toFixed(0)}% of one core during the rollout (${base.cpuPercent.toFixed(0)}% direct); database, gateway, worker and ${fleet} agents share 2 cores`,
    }), agentsOwn]
  } finally {
    if (ticker) clearInterval(ticker)
    for (const a of agents) a.end()
    await gateway.close(1_000)
    for (const c of channels) c.close()
  }
}

/** Wall time, process CPU and event-loop delay of one run. */
export async function measured<T>(op: () => Promise<T>): Promise<{ result: T; ms: number; cpuPercent: number; loopP99Ms: number }> {
  const eld = monitorEventLoopDelay({ resolution: 10 })
  eld.enable()
  const cpu = process.cpuUsage()
  const started = performance.now()
  const result = await op()
  const ms = performance.now() - started
  const used = process.cpuUsage(cpu)
  eld.disable()
  return { result, ms, cpuPercent: ((used.user + used.system) / 1_000 / ms) * 100, loopP99Ms: eld.percentile(99) / 1e6 }
}

/** Per batch: enqueue the upgrade commands, wait until every one completed, then the health wait. */
async function directUpgrade(db: Db, batches: string[][], artifact: { version: string; url: string; sha256: string }): Promise<void> {
  for (const [b, batch] of batches.entries()) {
    const commands = await Promise.all(batch.map((nodeId) => enqueueCommand(db, { nodeId, type: 'upgrade', payload: { artifact }, idempotencyKey: `bench-direct:${b}:${nodeId}` })))
    const ids = commands.map((c) => c.id)
    await until(async () => {
      const rows = (await db('agent_commands').whereIn('id', ids).whereNotIn('status', ['pending', 'sent', 'running']).select('status')) as { status: string }[]
      const failed = rows.filter((r) => r.status !== 'completed')
      if (failed.length > 0) throw new Error(`${failed.length} direct upgrade commands ended ${failed[0]!.status}`)
      return rows.length === ids.length
    }, `batch ${b} of direct upgrades to complete`, 60_000, 25)
    await new Promise((resolve) => setTimeout(resolve, HEALTH_WAIT_MS))
  }
}

export async function rollout(s: Pick<Setting, 'db' | 'catalogue' | 'target'>, operatorId: string, source: string = SOURCE): Promise<{ rolloutId: string; startedAt: Date }> {
  const { db } = s
  const created = await insertRollout(
    db,
    {
      chain_profile_id: 'devnet',
      node_type: 'full',
      binary_name: 'devnet-node',
      source_version: source,
      target_version: s.target.version,
      target_binary_url: s.target.url,
      target_binary_checksum: `sha256:${s.target.sha256}`,
      strategy: 'rolling',
      batch_size: BATCH,
      canary_size: null,
      failure_threshold: 0.1,
      health_wait_duration_ms: HEALTH_WAIT_MS,
      created_by: operatorId,
    },
    new Date(),
  )
  const registry = registerRolloutWorkflow(createWorkflowRegistry(), {
    db,
    logger,
    catalogue: () => s.catalogue,
    now: () => new Date(),
    pollIntervalMs: ORCHESTRATOR_POLL_MS,
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
  })
  const worker = createWorkflowWorker({ db, registry, logger, owner: 'bench-orchestrator', pollIntervalMs: WORKFLOW_POLL_MS, concurrency: WORKFLOW_CONCURRENCY })
  worker.start()
  try {
    const startedAt = new Date()
    await startRollout(db, created.id, { by: operatorId, now: startedAt })
    const done = await until(async () => {
      const r = await requireRollout(db, created.id)
      return isTerminalRollout(r.status) ? r : undefined
    }, `rollout ${created.id} to finish`, 600_000, 50)
    if (done.status !== 'completed') throw new Error(`the rollout ended ${done.status}: ${done.error_message ?? ''} (${done.succeeded_nodes} succeeded, ${done.failed_nodes} failed)`)
    return { rolloutId: created.id, startedAt }
  } finally {
    await worker.stop()
  }
}

/** What the figure claims happened: every node upgraded once, recorded, and reporting the new version. */
async function verify(db: Db, nodeIds: string[], agents: SimulatedAgent[], rolloutId: string): Promise<void> {
  const r = await requireRollout(db, rolloutId)
  if (r.succeeded_nodes !== nodeIds.length || r.total_nodes !== nodeIds.length) throw new Error(`rollout: ${r.succeeded_nodes} of ${r.total_nodes} succeeded, fleet ${nodeIds.length}`)
  const commands = Number((await db('agent_commands').where('idempotency_key', 'like', `rollout:${rolloutId}:%`).count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0)
  if (commands !== nodeIds.length) throw new Error(`rollout sent ${commands} upgrade commands for ${nodeIds.length} nodes`)
  const recorded = Number((await db('node_config_state').where({ binary_version: TARGET }).count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0)
  if (recorded !== nodeIds.length) throw new Error(`node_config_state: ${recorded} of ${nodeIds.length} nodes on ${TARGET}`)
  if (agents.some((a) => a.version !== TARGET || a.upgrades !== 2)) throw new Error('an agent was not upgraded exactly once by the baseline and once by the rollout')
  await until(
    async () => Number((await db('agent_status').where({ binary_version: TARGET }).count<{ n: number }[]>({ n: '*' }))[0]?.n ?? 0) === nodeIds.length,
    `every agent to report ${TARGET}`,
    10_000,
  )
}

const ms = (a: Date | null, b: Date | null): number | undefined => (a && b ? b.getTime() - a.getTime() : undefined)
function mean(values: Array<number | undefined>): number {
  const present = values.filter((v): v is number => v !== undefined)
  return present.length === 0 ? 0 : present.reduce((x, y) => x + y, 0) / present.length
}

/**
 * Where a node's time goes, from the rows the run wrote: pre-check and maintenance (node started ->
 * command created), the gateway's delivery (created -> sent), the agent (sent -> finished: the
 * stream, 50 ms of work, the reports written), the orchestrator noticing (finished -> the
 * `verifying` event), health validation (-> completed). Per batch: its span, and the gaps.
 */
async function breakdown(db: Db, rolloutId: string, startedAt: Date): Promise<{ perNode: string; perBatch: string }> {
  const nodes = (await db('rollout_nodes').where({ rollout_id: rolloutId }).select('node_id', 'batch_index', 'started_at', 'completed_at')) as Array<Record<string, unknown>>
  const commands = (await db('agent_commands').where('idempotency_key', 'like', `rollout:${rolloutId}:%`).select('node_id', 'created_at', 'sent_at', 'finished_at')) as Array<Record<string, unknown>>
  const verifying = (await db('outbox').where('subject', 'like', 'events.node.%.upgrade_phase_changed').select('payload')) as Array<{ payload: unknown }>
  const verifyingAt = new Map<string, Date>()
  for (const row of verifying) {
    const p = fromJson<{ node_id: string; rollout_id: string; upgrade_phase: string; occurred_at: string }>(row.payload)
    if (p.rollout_id === rolloutId && p.upgrade_phase === 'verifying') verifyingAt.set(p.node_id, new Date(p.occurred_at))
  }
  const byNode = new Map(commands.map((c) => [String(c.node_id), c]))
  const parts = { prepare: [] as Array<number | undefined>, deliver: [] as Array<number | undefined>, agent: [] as Array<number | undefined>, notice: [] as Array<number | undefined>, validate: [] as Array<number | undefined> }
  const batches = new Map<number, { start: number; end: number }>()
  for (const n of nodes) {
    const c = byNode.get(String(n.node_id))
    const started = toDateOrNull(n.started_at)
    const completed = toDateOrNull(n.completed_at)
    const created = c ? toDate(c.created_at) : null
    const sent = c ? toDateOrNull(c.sent_at) : null
    const finished = c ? toDateOrNull(c.finished_at) : null
    const verified = verifyingAt.get(String(n.node_id)) ?? null
    parts.prepare.push(ms(started, created))
    parts.deliver.push(ms(created, sent))
    parts.agent.push(ms(sent, finished))
    parts.notice.push(ms(finished, verified))
    parts.validate.push(ms(verified, completed))
    if (started && completed) {
      const b = Number(n.batch_index)
      const seen = batches.get(b)
      batches.set(b, { start: Math.min(seen?.start ?? Infinity, started.getTime()), end: Math.max(seen?.end ?? -Infinity, completed.getTime()) })
    }
  }
  const ordered = [...batches.entries()].sort((x, y) => x[0] - y[0]).map(([, v]) => v)
  const spans = ordered.map((b) => b.end - b.start)
  const gaps = ordered.slice(1).map((b, i) => b.start - ordered[i]!.end)
  const r = await requireRollout(db, rolloutId)
  const first = ordered[0]?.start
  const last = ordered[ordered.length - 1]?.end
  const f = (v: number) => `${v.toFixed(0)} ms`
  return {
    perNode:
      `pre-check + maintenance ${f(mean(parts.prepare))}, gateway delivery ${f(mean(parts.deliver))}, agent (stream + work + reports) ${f(mean(parts.agent))}, ` +
      `orchestrator noticing completion ${f(mean(parts.notice))}, health validation ${f(mean(parts.validate))}`,
    perBatch:
      `span ${f(mean(spans))}, gap between batches ${f(mean(gaps))}; start to first node ${f(first === undefined ? 0 : first - startedAt.getTime())}, ` +
      `last node to completed ${f(last === undefined || !r.completed_at ? 0 : r.completed_at.getTime() - last)}`,
  }
}

export async function until<T>(check: () => Promise<T | undefined | false>, what: string, timeoutMs: number, pollMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== false) return value
    if (Date.now() >= deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, pollMs))
  }
}

export async function issueTokens(db: Db, nodeIds: string[]): Promise<{ nodeId: string; token: string }[]> {
  const now = new Date()
  const out = nodeIds.map((nodeId) => ({ nodeId, token: AGENT_TOKEN_PREFIX + crypto.randomBytes(32).toString('base64url') }))
  for (let i = 0; i < out.length; i += INSERT_CHUNK) {
    await db('agent_tokens').insert(out.slice(i, i + INSERT_CHUNK).map((t) => ({ node_id: t.nodeId, token_hash: hashAgentToken(t.token), created_at: now, revoked_at: null })))
  }
  return out
}
