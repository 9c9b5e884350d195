/**
 * Heartbeat ingest (issue 4): a gateway keeps the latest heartbeat per node in memory and writes
 * them in batches — one statement for `nodes.last_heartbeat` and one upsert of `agent_status` per
 * batch, in one transaction — instead of a commit per heartbeat. A newer heartbeat from the same
 * node replaces an unwritten older one (its time supersedes it). A batch that fails to commit is
 * put back and retried, so no heartbeat is lost to a database hiccup.
 */
import { performance } from 'node:perf_hooks'
import type { Db, Queryable } from '../db/knex.js'
import { isPostgres, toJson } from '../db/dialect.js'
import type { Logger } from '../log.js'

export interface HeartbeatRecord {
  nodeId: string
  receivedAt: Date
  agentVersion: string | null
  binaryVersion: string | null
  syncStatus: string
  processState: string
  restartsInWindow: number
  metrics: Record<string, number>
  runningCommandIds: string[]
  /** The chain process's pid on the host; null when none runs. Operators only. */
  chainPid?: number | null
  /** Called once the heartbeat is committed (not when a newer one replaced it unwritten): the gateway acknowledges it to the agent. */
  onCommitted?: () => void
}

interface Entry {
  record: HeartbeatRecord
  /** performance.now() when received: flush latency is measured from here to the commit. */
  receivedMark: number
}

export interface HeartbeatBatcherOptions {
  db: Db
  logger: Logger
  flushIntervalMs: number
  /** Flush early once this many nodes wait. */
  maxBatch?: number
  /** Called after each committed batch with every heartbeat's receive-to-commit latency (ms). */
  onFlushed?: (latenciesMs: Float64Array) => void
}

/**
 * Rows per statement: under SQLite's 500-term compound SELECT (knex's multi-row insert on
 * SQLite) and both databases' bind-parameter limits.
 */
const ROWS_PER_STATEMENT = 400

export class HeartbeatBatcher {
  private pending = new Map<string, Entry>()
  private timer: NodeJS.Timeout | undefined
  private flushing: Promise<void> | undefined
  private readonly maxBatch: number
  private stopped = false
  readonly stats = { received: 0, coalesced: 0, written: 0, failedFlushes: 0 }

  constructor(private readonly options: HeartbeatBatcherOptions) {
    this.maxBatch = options.maxBatch ?? 10_000
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.options.flushIntervalMs)
    this.timer.unref()
  }

  record(record: HeartbeatRecord): void {
    this.stats.received += 1
    if (this.pending.has(record.nodeId)) this.stats.coalesced += 1
    this.pending.set(record.nodeId, { record, receivedMark: performance.now() })
    if (this.pending.size >= this.maxBatch && !this.flushing) void this.flush()
  }

  get pendingCount(): number {
    return this.pending.size
  }

  /** Writes everything waiting; concurrent calls share one flush at a time. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing
    if (this.pending.size === 0) return
    const batch = this.pending
    this.pending = new Map()
    this.flushing = this.write(batch).finally(() => {
      this.flushing = undefined
    })
    await this.flushing
  }

  /** Stops the timer and writes what is left. */
  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    await this.flush()
  }

  private async write(batch: Map<string, Entry>): Promise<void> {
    const entries = [...batch.values()]
    try {
      await this.options.db.transaction(async (trx) => {
        // A heartbeat is superseded 15 s later, so this commit need not wait for its WAL flush:
        // a Postgres crash can forget the last ~200 ms of heartbeats (wal_writer_delay), never
        // corrupt anything, and the commit no longer waits on the disk (the p99 ingest latency).
        if (isPostgres(trx)) await trx.raw('SET LOCAL synchronous_commit = off')
        for (let i = 0; i < entries.length; i += ROWS_PER_STATEMENT) {
          const chunk = entries.slice(i, i + ROWS_PER_STATEMENT).map((e) => e.record)
          await writeLastHeartbeats(trx, chunk)
          await upsertAgentStatus(trx, chunk)
        }
      })
    } catch (err) {
      this.stats.failedFlushes += 1
      // Put the batch back unless a newer heartbeat from the same node arrived meanwhile.
      for (const entry of entries) {
        if (!this.pending.has(entry.record.nodeId)) this.pending.set(entry.record.nodeId, entry)
      }
      this.options.logger.warn({ err, nodes: entries.length }, 'heartbeat batch not written; retrying on the next flush')
      return
    }
    this.stats.written += entries.length
    for (const entry of entries) entry.record.onCommitted?.()
    if (this.options.onFlushed) {
      const done = performance.now()
      const latencies = new Float64Array(entries.length)
      entries.forEach((e, i) => (latencies[i] = done - e.receivedMark))
      this.options.onFlushed(latencies)
    }
  }
}

/** One UPDATE for the whole chunk; a late batch never moves `last_heartbeat` backwards. */
export async function writeLastHeartbeats(db: Queryable, records: readonly HeartbeatRecord[]): Promise<void> {
  if (records.length === 0) return
  const pg = isPostgres(db)
  const tuple = pg ? '(?::uuid, ?::timestamptz)' : '(?, ?)'
  const bindings: (string | number | Date)[] = []
  for (const r of records) bindings.push(r.nodeId, pg ? r.receivedAt : r.receivedAt.getTime())
  await db.raw(
    `WITH v(id, ts) AS (VALUES ${records.map(() => tuple).join(', ')})
     UPDATE nodes SET last_heartbeat = v.ts FROM v
     WHERE nodes.id = v.id AND (nodes.last_heartbeat IS NULL OR nodes.last_heartbeat < v.ts)`,
    bindings,
  )
}

export async function upsertAgentStatus(db: Queryable, records: readonly HeartbeatRecord[]): Promise<void> {
  if (records.length === 0) return
  await db('agent_status')
    .insert(
      records.map((r) => ({
        node_id: r.nodeId,
        reported_at: r.receivedAt,
        agent_version: r.agentVersion,
        binary_version: r.binaryVersion,
        sync_status: r.syncStatus,
        process_state: r.processState,
        restarts_in_window: r.restartsInWindow,
        chain_pid: r.chainPid ?? null,
        metrics: toJson(r.metrics),
        running_command_ids: toJson(r.runningCommandIds),
      })),
    )
    .onConflict('node_id')
    .merge()
}

export interface AgentStatus {
  node_id: string
  reported_at: Date
  agent_version: string | null
  binary_version: string | null
  sync_status: string
  process_state: string
  restarts_in_window: number
  metrics: Record<string, number>
  running_command_ids: string[]
  chain_pid: number | null
}
