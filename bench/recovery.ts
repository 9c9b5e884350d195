/**
 * Recovery after a fault (issue 22), reported against the agents' heartbeat interval (15 s): the
 * fraction of one interval a fault costs before things flow again. Lower is better.
 *
 * 1. Agent reconnection after a gateway restart (Postgres): one agent-gateway in a process of its
 *    own (recovery/gateway-process.ts) and 1,000 real AgentClients in two other processes
 *    (recovery/agents-process.ts), all connected; the gateway is killed with SIGKILL, stays away
 *    long enough for any backoff to have grown (5 s), and is started again on the same port. From
 *    the moment it listens again: how long until each agent has its stream back (p50, p99, last).
 * 2. Relay resume after NATS returns (SQLite, Postgres): an outbox relay and its NATS connection
 *    with the daemons' defaults; nats-server stopped, events committed, 15 s of outage (the relay
 *    failing meanwhile), nats-server started again. From the moment it accepts connections: how
 *    long until the outbox is empty (this includes the NATS client's own reconnect wait, 1 s).
 */
import { execa, type ResultPromise } from 'execa'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ensureDevCertificates } from '../src/agent-gateway/tls.js'
import { connectNatsBus } from '../src/events/nats-bus.js'
import { countUnpublished, enqueueEvents, notifyCommitted, type OutboxEvent } from '../src/events/outbox.js'
import { OutboxRelay } from '../src/events/relay.js'
import { createLogger } from '../src/log.js'
import { startNats } from '../test/helpers/nats.js'
import { freePort } from '../test/helpers/ports.js'
import { benchDatabase, type Dialect } from './databases.js'
import { insertFleet } from './fleet.js'
import { figure, type Bench, type BenchFigure } from './lib.js'
import { issueTokens } from './rollouts.js'

/** The production heartbeat interval (AGENT_HEARTBEAT_INTERVAL): the yardstick of every figure here. */
const HEARTBEAT_INTERVAL_MS = 15_000
const AGENTS = 1_000
const AGENT_PROCESSES = 2
const GATEWAY_OUTAGE_MS = 5_000
const NATS_OUTAGE_MS = 15_000
const EVENTS = 200
const here = path.dirname(fileURLToPath(import.meta.url))
const repoRoot = path.dirname(here)
const logger = createLogger({ level: 'silent' })

export const benchRecovery: Bench = async (ctx) => [await agentReconnection(ctx), ...(await relayResume(ctx))]

const until = async (ok: () => boolean | Promise<boolean>, what: string, timeoutMs: number, everyMs = 20): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

const tsxChild = (file: string, env: Record<string, string>, ipc = false): ResultPromise =>
  execa(process.execPath, ['--import', 'tsx', path.join(here, 'recovery', file)], {
    cwd: repoRoot,
    env,
    reject: false,
    stdin: 'ignore',
    stdout: ipc ? 'inherit' : 'pipe',
    stderr: 'inherit',
    ...(ipc ? { ipc: true, serialization: 'json' } : {}),
  }) as ResultPromise

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0
}

async function agentReconnection(ctx: Parameters<Bench>[0]): Promise<BenchFigure> {
  const count = Math.max(100, Math.round(AGENTS * ctx.scale))
  const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-bench-tls-'))
  const tls = ensureDevCertificates(tlsDir)
  const { db, url, drop } = await benchDatabase('postgres', ctx.postgresUrl)
  const port = await freePort()
  const children: ResultPromise[] = []
  let gateway: ResultPromise | undefined
  const startGateway = async (): Promise<number> => {
    const child = tsxChild('gateway-process.ts', { ...process.env, DATABASE_URL: url, PORT: String(port), TLS_DIR: tlsDir } as Record<string, string>)
    gateway = child
    return new Promise<number>((resolve, reject) => {
      let out = ''
      child.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8')
        const ready = /ready (\d+)/.exec(out)
        if (ready) resolve(Number(ready[1]))
      })
      void child.then((result) => reject(new Error(`the gateway process exited before it was ready: ${result.exitCode ?? result.signal}`)))
    })
  }
  const status = new Map<ResultPromise, { connected: number; reconnected: number }>()
  const total = (key: 'connected' | 'reconnected') => [...status.values()].reduce((n, s) => n + s[key], 0)
  try {
    const nodeIds = await insertFleet(db, count)
    const tokens = await issueTokens(db, nodeIds)
    await startGateway()
    const connectStarted = Date.now()
    const per = Math.ceil(count / AGENT_PROCESSES)
    for (let p = 0; p < AGENT_PROCESSES; p++) {
      const child = tsxChild('agents-process.ts', process.env as Record<string, string>, true)
      children.push(child)
      status.set(child, { connected: 0, reconnected: 0 })
      child.on('message', (message: unknown) => {
        const m = message as { connected?: number; reconnected?: number }
        if (typeof m.connected === 'number' && typeof m.reconnected === 'number') status.set(child, { connected: m.connected, reconnected: m.reconnected })
      })
      child.send({ targets: `127.0.0.1:${port}`, caFile: tls.caFile, agents: tokens.slice(p * per, (p + 1) * per) })
    }
    const progress = setInterval(() => ctx.log(`  ${total('connected')} of ${count} agents connected`), 10_000)
    try {
      await until(() => total('connected') === count, `${count} agents connected`, 180_000, 100)
    } finally {
      clearInterval(progress)
    }
    const firstConnectMs = Date.now() - connectStarted
    ctx.log(`${count} agents connected to the gateway in ${AGENT_PROCESSES} processes in ${firstConnectMs} ms (processes starting included); killing it for ${GATEWAY_OUTAGE_MS / 1_000} s`)

    gateway?.kill('SIGKILL')
    await gateway
    await until(() => total('connected') === 0, 'every agent to notice the gateway is gone', 30_000)
    await new Promise((resolve) => setTimeout(resolve, GATEWAY_OUTAGE_MS))
    const readyAt = await startGateway()
    await until(() => total('reconnected') === count, `${count} agents reconnected`, 120_000)
    const times: number[] = []
    for (const child of children) {
      const report = new Promise<number[]>((resolve) => {
        const onMessage = (message: unknown) => {
          const m = message as { times?: number[] }
          if (m.times) {
            child.off('message', onMessage)
            resolve(m.times)
          }
        }
        child.on('message', onMessage)
      })
      child.send('report')
      times.push(...(await report))
    }
    const delays = times.map((t) => Math.max(0, t - readyAt)).sort((a, b) => a - b)
    const [first, p50, p99, last] = [delays[0] ?? 0, percentile(delays, 0.5), percentile(delays, 0.99), delays[delays.length - 1] ?? 0]
    ctx.log(`reconnected after the gateway listened again: first ${first} ms, p50 ${p50} ms, p99 ${p99} ms, last ${last} ms (load average ${os.loadavg()[0]?.toFixed(1)})`)
    return figure({
      name: `agent reconnection after a gateway restart: ${count} agents (${AGENT_PROCESSES} processes) back on a gateway killed -9 and restarted after ${GATEWAY_OUTAGE_MS / 1_000} s (postgres); p50 ${p50} ms, p99 ${p99} ms, last ${last} ms`,
      baseline: `the heartbeat interval, ${HEARTBEAT_INTERVAL_MS / 1_000} s`,
      unit: 'ms (p99)',
      value: p99,
      baselineValue: HEARTBEAT_INTERVAL_MS,
      aim: 'every agent within 2 s (0.13 of the interval)',
      notes: `from the restarted gateway listening to each agent having its stream back (registered, stream accepted, first heartbeat sent); first ${first} ms; the first connection of all ${count} took ${firstConnectMs} ms with the processes starting; lower is better; gateway, agents and Postgres share the machine (load average ${os.loadavg()[0]?.toFixed(1)} at the end)`,
    })
  } finally {
    for (const child of children) {
      if (child.connected) child.send('stop')
    }
    await Promise.race([Promise.all(children), new Promise((resolve) => setTimeout(resolve, 10_000))])
    for (const child of children) child.kill('SIGKILL')
    gateway?.kill('SIGKILL')
    await gateway
    await drop()
    fs.rmSync(tlsDir, { recursive: true, force: true })
  }
}

async function relayResume(ctx: Parameters<Bench>[0]): Promise<BenchFigure[]> {
  const figures: BenchFigure[] = []
  // A nats-server of its own: this bench stops it.
  const nats = await startNats()
  const run = crypto.randomBytes(4).toString('hex')
  try {
    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const database = await benchDatabase(dialect, ctx.postgresUrl)
      // The daemons' defaults: the bus's reconnect wait, the relay's poll interval and back-off.
      const bus = await connectNatsBus({ url: nats.url, logger, name: `bench-recovery-${dialect}` })
      const relay = new OutboxRelay({ db: database.db, bus, logger })
      relay.start()
      try {
        await nats.stop()
        const events: OutboxEvent[] = Array.from({ length: EVENTS }, (_, i) => ({ subject: `events.bench.${run}.${dialect}.resume`, payload: { n: i } }))
        await database.db.transaction((trx) => enqueueEvents(trx, events))
        notifyCommitted()
        await new Promise((resolve) => setTimeout(resolve, NATS_OUTAGE_MS))
        if ((await countUnpublished(database.db)) !== EVENTS) throw new Error('events were published while NATS was stopped')
        await nats.start()
        const backAt = Date.now()
        await until(async () => (await countUnpublished(database.db)) === 0, 'the outbox to be published after NATS returned', 60_000)
        const resumeMs = Date.now() - backAt
        ctx.log(`${dialect}: ${EVENTS} events published ${resumeMs} ms after nats-server accepted connections again`)
        figures.push(
          figure({
            name: `outbox relay resume after NATS returns (${dialect}): ${EVENTS} events committed during a ${NATS_OUTAGE_MS / 1_000} s outage published ${resumeMs} ms after nats-server was back`,
            baseline: `the heartbeat interval, ${HEARTBEAT_INTERVAL_MS / 1_000} s`,
            unit: 'ms',
            value: resumeMs,
            baselineValue: HEARTBEAT_INTERVAL_MS,
            aim: 'within 1 s of the client reconnecting (issue 22, item 4)',
            notes: "includes the NATS client's reconnect wait (1 s); lower is better",
          }),
        )
      } finally {
        await relay.stop()
        await bus.close()
        await database.drop()
      }
    }
  } finally {
    await nats.destroy()
  }
  return figures
}
