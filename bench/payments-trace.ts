/**
 * Where the payments bench's burst spends its time: a timestamp per payment at each stage
 * (completion committed, handed to the bus by the relay, PubAck, consumer's handler started,
 * activation committed), statement time per kind on each database, and CPU used by this process
 * and by the whole machine over the burst.
 */
import fs from 'node:fs'
import type { Db } from '../src/db/knex.js'
import type { BusMessage, EventBus } from '../src/events/bus.js'

export interface PaymentStages {
  committed?: number
  published?: number
  acked?: number
  received?: number
  processed?: number
}

interface StatementTotal {
  count: number
  ms: number
}

const decoder = new TextDecoder()

/** Stages keyed by payment id; the bus wrappers map message ids to payments. */
export class BurstTrace {
  readonly stages = new Map<string, PaymentStages>()
  private readonly paymentOf = new Map<string, string>()
  private readonly statements = new Map<string, Map<string, StatementTotal>>()
  private relayCycles = 0
  private startedAt = 0
  private startedHr = 0n
  private cpuAt: NodeJS.CpuUsage | undefined
  private machineAt: number[] | undefined
  private readonly postgres = new Map<string, Db>()
  private postgresAt = new Map<number, number>()

  stage(paymentId: string): PaymentStages {
    let s = this.stages.get(paymentId)
    if (!s) this.stages.set(paymentId, (s = {}))
    return s
  }

  paymentFor(messageId: string | undefined): string | undefined {
    return messageId === undefined ? undefined : this.paymentOf.get(messageId)
  }

  /** The bus as the relay sees it: stamps the hand-over and the PubAck of each payment event. */
  publishing(bus: EventBus): EventBus {
    return {
      ...bus,
      publish: async (message) => {
        const paymentId = String((JSON.parse(decoder.decode(message.data)) as { payment_id?: unknown }).payment_id)
        this.paymentOf.set(message.messageId, paymentId)
        const s = this.stage(paymentId)
        s.published ??= performance.now()
        await bus.publish(message)
        s.acked ??= performance.now()
      },
    }
  }

  /** The bus as the consumer sees it: stamps when its handler starts on each message. */
  consuming(bus: EventBus): EventBus {
    return {
      ...bus,
      subscribe: (options, handler) =>
        bus.subscribe(options, (message: BusMessage) => {
          const paymentId = this.paymentFor(message.messageId)
          if (paymentId) this.stage(paymentId).received ??= performance.now()
          return handler(message)
        }),
    }
  }

  /** CPU ticks of every server process connected to the watched databases, by pid. */
  private async postgresTicks(): Promise<Map<number, number>> {
    const ticks = new Map<number, number>()
    for (const db of this.postgres.values()) {
      const result = (await db.raw('select pid from pg_stat_activity where datname = current_database()')) as { rows: Array<{ pid: number }> }
      for (const { pid } of result.rows) ticks.set(pid, processTicks(pid))
    }
    return ticks
  }

  relayCycle(): void {
    this.relayCycles++
  }

  /** Totals statement time on `db` by statement kind (its SQL's first 60 characters: knex writes one line). */
  timeStatements(name: string, db: Db): void {
    const totals = new Map<string, StatementTotal>()
    this.statements.set(name, totals)
    const started = new Map<string, number>()
    db.on('query', (q: { __knexQueryUid: string }) => started.set(q.__knexQueryUid, performance.now()))
    const done = (q: { __knexQueryUid: string; sql: string }): void => {
      const t0 = started.get(q.__knexQueryUid)
      if (t0 === undefined) return
      started.delete(q.__knexQueryUid)
      const key = q.sql.slice(0, 60)
      const total = totals.get(key) ?? { count: 0, ms: 0 }
      total.count++
      total.ms += performance.now() - t0
      totals.set(key, total)
    }
    db.on('query-response', (_response: unknown, q: { __knexQueryUid: string; sql: string }) => done(q))
    db.on('query-error', (_error: unknown, q: { __knexQueryUid: string; sql: string }) => done(q))
  }

  /** Also measures the CPU of `db`'s server processes (a Postgres on this machine). */
  watchPostgres(name: string, db: Db): void {
    this.postgres.set(name, db)
  }

  /** Forgets everything measured so far (the warm-up and latency runs) and starts the clock. */
  async start(): Promise<void> {
    this.postgresAt = await this.postgresTicks()
    this.stages.clear()
    for (const totals of this.statements.values()) totals.clear()
    this.relayCycles = 0
    this.startedAt = performance.now()
    this.startedHr = process.hrtime.bigint()
    this.cpuAt = process.cpuUsage()
    this.machineAt = machineTicks()
  }

  /** The breakdown of the burst since `start()`, as lines for the bench log. */
  async report(): Promise<string[]> {
    const wallMs = performance.now() - this.startedAt
    const cpu = process.cpuUsage(this.cpuAt)
    const machine = machineTicks()
    const postgresAfter = await this.postgresTicks()
    let postgresMs = 0
    for (const [pid, ticks] of postgresAfter) postgresMs += (ticks - (this.postgresAt.get(pid) ?? 0)) * MS_PER_TICK
    const processMs = (cpu.user + cpu.system) / 1000
    const all = [...this.stages.values()]
    const at = (pick: (s: PaymentStages) => number | undefined): number[] =>
      all.map(pick).filter((v): v is number => v !== undefined).sort((a, b) => a - b)
    const rel = (v: number | undefined): string => (v === undefined ? '-' : `${(v - this.startedAt).toFixed(0)}`)
    const span = (name: string, pick: (s: PaymentStages) => number | undefined): string => {
      const v = at(pick)
      return `${name} ${rel(v[0])}-${rel(v[v.length - 1])}`
    }
    const gap = (name: string, from: (s: PaymentStages) => number | undefined, to: (s: PaymentStages) => number | undefined): string => {
      const d = all
        .map((s) => (from(s) !== undefined && to(s) !== undefined ? (to(s) as number) - (from(s) as number) : undefined))
        .filter((v): v is number => v !== undefined)
        .sort((a, b) => a - b)
      const p50 = d[Math.floor(d.length / 2)] ?? 0
      const mean = d.reduce((a, b) => a + b, 0) / Math.max(1, d.length)
      return `${name} p50 ${p50.toFixed(1)} mean ${mean.toFixed(1)}`
    }
    const handlerMs = all.reduce((sum, s) => sum + (s.processed !== undefined && s.received !== undefined ? s.processed - s.received : 0), 0)
    const lines = [
      `burst ${wallMs.toFixed(0)} ms; stage windows (ms from the start): ${[
        span('committed', (s) => s.committed),
        span('published', (s) => s.published),
        span('acked', (s) => s.acked),
        span('handler started', (s) => s.received),
        span('activated', (s) => s.processed),
      ].join(', ')}`,
      `per payment (ms): ${[
        gap('commit->relay', (s) => s.committed, (s) => s.published),
        gap('publish->PubAck', (s) => s.published, (s) => s.acked),
        gap('PubAck->handler', (s) => s.acked, (s) => s.received),
        gap('handler', (s) => s.received, (s) => s.processed),
      ].join('; ')}; relay cycles ${this.relayCycles}; handlers busy on average ${(handlerMs / wallMs).toFixed(1)} at once`,
      `CPU over the burst: this process ${((processMs / wallMs) * 100).toFixed(0)}% of a core (${(processMs / Math.max(1, all.length)).toFixed(2)} ms per payment)${
        this.postgres.size > 0 ? `, the Postgres backends of both databases ${(postgresMs / Math.max(1, all.length)).toFixed(2)} ms per payment` : ''
      }, the machine ${machineBusy(this.machineAt, machine)}`,
    ]
    // The burst's window on a CPU profile's clock (µs), to cut the profile of a --cpu-prof run.
    if (process.execArgv.some((a) => a.startsWith('--cpu-prof'))) lines.push(`profile window ${this.startedHr / 1000n}-${process.hrtime.bigint() / 1000n} µs`)
    for (const [name, totals] of this.statements) {
      const top = [...totals.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 8)
      const sum = [...totals.values()].reduce((a, t) => a + t.ms, 0)
      const count = [...totals.values()].reduce((a, t) => a + t.count, 0)
      lines.push(`${name}: ${count} statements, ${sum.toFixed(0)} ms in flight in all; top: ${top.map(([k, t]) => `[${k}] ${t.count}x ${(t.ms / t.count).toFixed(2)} ms`).join(' | ')}`)
    }
    return lines
  }
}

/** Linux's USER_HZ: /proc reports CPU times in hundredths of a second. */
export const MS_PER_TICK = 10

/** utime + stime of a process, in ticks (0 when it is gone or off Linux). */
export function processTicks(pid: number): number {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    return Number(fields[11] ?? 0) + Number(fields[12] ?? 0)
  } catch {
    return 0
  }
}

/** Busy and total jiffies of all CPUs (/proc/stat), or undefined off Linux. */
function machineTicks(): number[] | undefined {
  try {
    const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]?.trim().split(/\s+/).slice(1).map(Number) ?? []
    const total = cpu.reduce((a, b) => a + b, 0)
    const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0)
    return [total - idle, total]
  } catch {
    return undefined
  }
}

function machineBusy(before: number[] | undefined, after: number[] | undefined): string {
  if (!before || !after) return 'unknown'
  const busy = (after[0] as number) - (before[0] as number)
  const total = (after[1] as number) - (before[1] as number)
  return `${((busy / Math.max(1, total)) * 100).toFixed(0)}% busy`
}
