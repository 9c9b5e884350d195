/**
 * Heartbeat ingest at one gateway (issue 4). Two parts, on each database:
 *
 * 1. Capacity: heartbeats/s written by the gateway's batcher (last_heartbeat update + agent_status
 *    upsert, one transaction per batch) for a 50,000-node fleet, against a bare batched upsert loop
 *    (multi-row INSERT … ON CONFLICT into agent_status) on the same database, same run.
 * 2. The target load over real gRPC with TLS: simulated agents (one authenticated stream each, in
 *    a process of their own) send heartbeats at 3,333/s in total (50,000 agents at 15 s); reports the p99
 *    receive-to-commit latency, and that every heartbeat sent was received and written.
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import path from 'node:path'
import os from 'node:os'
import fs from 'node:fs'
import readline from 'node:readline'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import { AgentGateway } from '../src/agent-gateway/gateway.js'
import { HeartbeatBatcher, type HeartbeatRecord } from '../src/agent-gateway/heartbeats.js'
import { ensureDevCertificates, readTlsMaterial } from '../src/agent-gateway/tls.js'
import { AGENT_TOKEN_PREFIX, hashAgentToken } from '../src/agent-gateway/tokens.js'
import type { Db } from '../src/db/knex.js'
import { toJson } from '../src/db/dialect.js'
import { uuidv7 } from '../src/db/ids.js'
import { benchDatabase, type Dialect } from './databases.js'
import { INSERT_CHUNK, insertFleet } from './fleet.js'
import type { HeartbeatAgentsPlan } from './heartbeat-agents.js'
import { figure, interleaved, type Bench, type BenchFigure } from './lib.js'

const FLEET = 50_000
const TARGET_RATE = FLEET / 15
const BATCH = 1_000
const quiet = pino({ level: 'silent' })

export const benchHeartbeats: Bench = async (ctx) => {
  const figures: BenchFigure[] = []
  const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-tls-'))
  const tls = readTlsMaterial(ensureDevCertificates(tlsDir))
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const { db, drop } = await benchDatabase(dialect, ctx.postgresUrl)
      try {
        const fleet = Math.max(2_000, Math.round(FLEET * ctx.scale))
        ctx.log(`${dialect}: creating ${fleet} nodes`)
        const nodeIds = await insertFleet(db, fleet)
        figures.push(await capacity(db, dialect, nodeIds, ctx.scale))
        figures.push(...(await overGrpc(db, dialect, nodeIds, tls, ctx)))
      } finally {
        await drop()
      }
    }
  } finally {
    fs.rmSync(tlsDir, { recursive: true, force: true })
  }
  return figures
}

function heartbeat(nodeId: string, now: Date): HeartbeatRecord {
  return {
    nodeId,
    receivedAt: now,
    agentVersion: '0.1.0',
    binaryVersion: '1.0.0',
    syncStatus: 'synced',
    processState: 'running',
    restartsInWindow: 0,
    metrics: { block_height: 1234567, peer_count: 12, rpc_latency_ms: 3, rpc_up: 1 },
    runningCommandIds: [],
  }
}

async function capacity(db: Db, dialect: Dialect, nodeIds: string[], scale: number): Promise<BenchFigure> {
  const batcher = new HeartbeatBatcher({ db, logger: quiet, flushIntervalMs: 1_000_000, maxBatch: Number.MAX_SAFE_INTEGER })
  let a = 0
  let b = 0
  const { bare, batched } = await interleaved(
    {
      // The baseline: one multi-row upsert of BATCH rows per commit, nothing else.
      bare: async () => {
        const now = new Date()
        const rows = []
        for (let i = 0; i < BATCH; i++) {
          const r = heartbeat(nodeIds[a++ % nodeIds.length]!, now)
          rows.push({
            node_id: r.nodeId, reported_at: now, agent_version: r.agentVersion, binary_version: r.binaryVersion, sync_status: r.syncStatus,
            process_state: r.processState, restarts_in_window: 0, metrics: toJson(r.metrics), running_command_ids: toJson([]),
          })
        }
        for (let i = 0; i < rows.length; i += INSERT_CHUNK) await db('agent_status').insert(rows.slice(i, i + INSERT_CHUNK)).onConflict('node_id').merge()
      },
      // The gateway's path: record BATCH heartbeats, one flush (nodes.last_heartbeat + agent_status).
      batched: async () => {
        const now = new Date()
        for (let i = 0; i < BATCH; i++) batcher.record(heartbeat(nodeIds[b++ % nodeIds.length]!, now))
        await batcher.flush()
      },
    },
    { msPerRound: 500 * scale },
  )
  return figure({
    name: `heartbeat ingest capacity, gateway batcher flat out, ${nodeIds.length} nodes, batches of ${BATCH} (${dialect})`,
    baseline: `bare batched upsert loop into agent_status (${dialect})`,
    unit: 'heartbeats/s',
    value: bare === 0 ? 0 : batched * BATCH,
    baselineValue: bare * BATCH,
    aim: `>= ${Math.round(TARGET_RATE)}/s absolute`,
    notes: 'the batcher writes two tables per batch (nodes.last_heartbeat and agent_status); the baseline one',
  })
}

async function overGrpc(db: Db, dialect: Dialect, nodeIds: string[], tls: { ca: Buffer; cert: Buffer; key: Buffer }, ctx: { scale: number; log(l: string): void }): Promise<BenchFigure[]> {
  // Simulated agents: each one authenticated stream; together they send at the 50,000-agent rate.
  const agents = Math.min(nodeIds.length, Math.max(500, Math.round(5_000 * ctx.scale)))
  const seconds = Math.max(5, Math.round(15 * ctx.scale))
  const tokens = await issueTokens(db, nodeIds.slice(0, agents))
  const latencies: number[] = []
  const gateway = new AgentGateway({
    db,
    logger: quiet,
    heartbeatIntervalSeconds: 15,
    progressCheckIntervalSeconds: 30,
    heartbeatFlushIntervalMs: 25,
    commandPollIntervalMs: 1_000,
    onHeartbeatsFlushed: (l) => {
      for (const v of l) latencies.push(v)
    },
  })
  const port = await gateway.listen('127.0.0.1', 0, grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
  // The agents run in a process of their own (bench/heartbeat-agents.ts): the gateway's event loop is its own.
  const planFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-agents-')), 'plan.json')
  const plan: HeartbeatAgentsPlan = { port, caPem: tls.ca.toString('utf8'), agents: tokens, rate: TARGET_RATE, seconds }
  fs.writeFileSync(planFile, JSON.stringify(plan), { mode: 0o600 })
  const generator = spawn(process.execPath, ['--import', 'tsx', path.join(path.dirname(fileURLToPath(import.meta.url)), 'heartbeat-agents.ts'), planFile], { stdio: ['pipe', 'pipe', 'inherit'] })
  const exited = new Promise<void>((resolve) => generator.once('exit', () => resolve()))
  const output = readline.createInterface({ input: generator.stdout! })
  const nextLine = () =>
    new Promise<string>((resolve, reject) => {
      output.once('line', resolve)
      generator.once('exit', (code) => reject(new Error(`the simulated agents exited ${code}`)))
    })
  try {
    ctx.log(`${dialect}: connecting ${agents} agents over gRPC/TLS from another process`)
    if ((await nextLine()) !== 'connected') throw new Error('the simulated agents did not connect')
    const eld = monitorEventLoopDelay({ resolution: 10 })
    eld.enable()
    ctx.log(`${dialect}: sending ${Math.round(TARGET_RATE)} heartbeats/s for ${seconds}s`)
    generator.stdin!.write('go\n')
    const report = JSON.parse(await nextLine()) as { sent: number; seconds: number }
    const sent = report.sent
    const achievedRate = sent / report.seconds
    eld.disable()
    // The gateway's own event loop: when it is not what delays commits, the tail is the database's.
    const loopP99 = eld.percentile(99) / 1e6
    ctx.log(`${dialect}: event loop delay p50 ${(eld.percentile(50) / 1e6).toFixed(1)} ms, p99 ${loopP99.toFixed(1)} ms, max ${(eld.max / 1e6).toFixed(1)} ms`)
    // Everything sent must arrive and be written.
    const deadline = Date.now() + 10_000
    while (gateway.heartbeats.stats.received < sent && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    await gateway.heartbeats.flush()
    const stats = gateway.heartbeats.stats
    const lost = sent - stats.received
    const unwritten = (await db('nodes').whereIn('id', nodeIds.slice(0, agents)).whereNull('last_heartbeat').count<{ n: number }[]>({ n: '*' }))[0]
    const sorted = [...latencies].sort((x, y) => x - y)
    const p99 = sorted[Math.floor(sorted.length * 0.99)] ?? 0
    const p50 = sorted[Math.floor(sorted.length * 0.5)] ?? 0
    ctx.log(`${dialect}: sent ${sent}, received ${stats.received}, coalesced ${stats.coalesced}, failed flushes ${stats.failedFlushes}, p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`)
    return [
      figure({
        name: `heartbeats over gRPC/TLS from ${agents} simulated agents at the 50,000-agent rate (${dialect}); p99 receive-to-commit ${p99.toFixed(1)} ms, p50 ${p50.toFixed(1)} ms; lost ${lost}; nodes never written ${Number(unwritten?.n ?? 0)}`,
        baseline: 'target rate (50,000 agents / 15 s)',
        unit: 'heartbeats/s',
        value: achievedRate,
        baselineValue: TARGET_RATE,
        aim: '>= 1.0, p99 < 50 ms, 0 lost',
        notes: `gateway event-loop delay p99 ${loopP99.toFixed(1)} ms; the agents in a process of their own; database, gateway and agents share 2 cores`,
      }),
    ]
  } finally {
    generator.stdin!.end()
    await exited
    fs.rmSync(path.dirname(planFile), { recursive: true, force: true })
    await gateway.close(500)
  }
}

async function issueTokens(db: Db, nodeIds: string[]): Promise<{ nodeId: string; token: string }[]> {
  const now = new Date()
  const out = nodeIds.map((nodeId) => ({ nodeId, token: AGENT_TOKEN_PREFIX + crypto.randomBytes(32).toString('base64url') }))
  for (let i = 0; i < out.length; i += INSERT_CHUNK) {
    await db('agent_tokens').insert(out.slice(i, i + INSERT_CHUNK).map((t) => ({ node_id: t.nodeId, token_hash: hashAgentToken(t.token), created_at: now, revoked_at: null })))
  }
  return out
}
