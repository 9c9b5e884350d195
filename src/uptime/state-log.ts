/**
 * The uptime state log (spec: "Uptime records"): one row per stretch of time a node spent in a
 * `state`, append-only except for closing the open row. A partial unique index allows exactly
 * one open row (exited_at IS NULL) per node, so a second writer racing on the same node fails
 * instead of leaving two open intervals.
 */
import type { Queryable } from '../db/knex.js'
import { toDate, toDateOrNull } from '../db/dialect.js'
import type { NodeState } from '../nodes/states.js'

export const STATE_LOG_TABLE = 'uptime_state_log'
const TRIGGER_MAX = 64
/** Rows per statement: five parameters each in the insert. */
const CHANGES_PER_STATEMENT = 500

export interface StateLogEntry {
  node_id: string
  state: NodeState
  entered_at: Date
  exited_at: Date | null
  trigger: string
}

export interface StateChange {
  nodeId: string
  state: NodeState
  at: Date
  /** Who moved the node (the state machine's writer), optionally with the reason. */
  writer: string
  reason?: string | null | undefined
}

export function triggerOf(writer: string, reason?: string | null): string {
  const text = reason ? `${writer}: ${reason}` : writer
  return text.length > TRIGGER_MAX ? `${text.slice(0, TRIGGER_MAX - 1)}…` : text
}

/** Opens a node's first interval (the node was just inserted; nothing is open yet). */
export async function openFirstInterval(db: Queryable, change: StateChange): Promise<void> {
  await insertOpenInterval(db, change)
}

/** Closes the node's open interval at `at` and opens the next one: two statements, same transaction as the change. */
export async function appendStateChange(db: Queryable, change: StateChange): Promise<void> {
  await db(STATE_LOG_TABLE).where({ node_id: change.nodeId }).whereNull('exited_at').update({ exited_at: change.at })
  await insertOpenInterval(db, change)
}

/** appendStateChange for many nodes at once (an evaluation cycle's moves): one close and one insert per chunk. */
export async function appendStateChanges(db: Queryable, changes: readonly StateChange[]): Promise<void> {
  for (let i = 0; i < changes.length; i += CHANGES_PER_STATEMENT) {
    const chunk = changes.slice(i, i + CHANGES_PER_STATEMENT)
    const byTime = new Map<number, string[]>()
    for (const change of chunk) {
      const nodeIds = byTime.get(change.at.getTime())
      if (nodeIds) nodeIds.push(change.nodeId)
      else byTime.set(change.at.getTime(), [change.nodeId])
    }
    for (const [at, nodeIds] of byTime) await db(STATE_LOG_TABLE).whereIn('node_id', nodeIds).whereNull('exited_at').update({ exited_at: new Date(at) })
    await db(STATE_LOG_TABLE).insert(chunk.map(intervalRow))
  }
}

async function insertOpenInterval(db: Queryable, change: StateChange): Promise<void> {
  await db(STATE_LOG_TABLE).insert(intervalRow(change))
}

function intervalRow(change: StateChange): Record<string, unknown> {
  return { node_id: change.nodeId, state: change.state, entered_at: change.at, exited_at: null, trigger: triggerOf(change.writer, change.reason) }
}

export function stateLogEntryFromRow(row: Record<string, unknown>): StateLogEntry {
  return {
    node_id: String(row.node_id),
    state: row.state as NodeState,
    entered_at: toDate(row.entered_at),
    exited_at: toDateOrNull(row.exited_at),
    trigger: String(row.trigger),
  }
}

/** A node's log, oldest first (tests and support). */
export async function readStateLog(db: Queryable, nodeId: string): Promise<StateLogEntry[]> {
  const rows = (await db(STATE_LOG_TABLE).where({ node_id: nodeId }).orderBy([{ column: 'entered_at' }, { column: 'id' }])) as Record<string, unknown>[]
  return rows.map(stateLogEntryFromRow)
}
