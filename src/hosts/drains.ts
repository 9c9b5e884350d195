/** The `host_drains` table (migration 0021): a drain's progress, one function per operation, the caller's transaction. */
import { toDate, toDateOrNull } from '../db/dialect.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'

export const DRAIN_STATUSES = ['running', 'completed', 'stopped', 'cancelled'] as const
export type DrainStatus = (typeof DRAIN_STATUSES)[number]

/** A drain as `host show` and the API show it. */
export interface HostDrain {
  id: string
  host_id: string
  status: DrainStatus
  requested_by: string | null
  current_node_id: string | null
  activity: string | null
  nodes_moved: number
  stop_reason: string | null
  stopped_at_node_id: string | null
  started_at: string
  updated_at: string
  finished_at: string | null
}

interface DrainRow extends Omit<HostDrain, 'nodes_moved' | 'started_at' | 'updated_at' | 'finished_at'> {
  nodes_moved: number | string
  started_at: unknown
  updated_at: unknown
  finished_at: unknown
}

function drainFromRow(row: DrainRow): HostDrain {
  return {
    ...row,
    nodes_moved: Number(row.nodes_moved),
    started_at: toDate(row.started_at).toISOString(),
    updated_at: toDate(row.updated_at).toISOString(),
    finished_at: toDateOrNull(row.finished_at)?.toISOString() ?? null,
  }
}

export async function insertDrain(db: Queryable, drain: { hostId: string; requestedBy: string | null; now: Date }): Promise<HostDrain> {
  const id = uuidv7(drain.now.getTime())
  await db('host_drains').insert({ id, host_id: drain.hostId, status: 'running', requested_by: drain.requestedBy, nodes_moved: 0, started_at: drain.now, updated_at: drain.now })
  return (await findDrain(db, id)) as HostDrain
}

export async function findDrain(db: Queryable, id: string): Promise<HostDrain | undefined> {
  const row = (await db('host_drains').where({ id }).first()) as DrainRow | undefined
  return row ? drainFromRow(row) : undefined
}

export async function runningDrainOf(db: Queryable, hostId: string): Promise<HostDrain | undefined> {
  const row = (await db('host_drains').where({ host_id: hostId, status: 'running' }).first()) as DrainRow | undefined
  return row ? drainFromRow(row) : undefined
}

/** The host's latest drain, running or not. */
export async function latestDrainOf(db: Queryable, hostId: string): Promise<HostDrain | undefined> {
  const row = (await db('host_drains').where({ host_id: hostId }).orderBy([{ column: 'started_at', order: 'desc' }, { column: 'id', order: 'desc' }]).first()) as DrainRow | undefined
  return row ? drainFromRow(row) : undefined
}

export interface DrainProgress {
  current_node_id?: string | null
  activity?: string | null
  nodes_moved?: number
}

/** Progress of a running drain; false when it is not running any more (cancelled meanwhile). */
export async function updateDrainProgress(db: Queryable, id: string, progress: DrainProgress, now: Date): Promise<boolean> {
  return (await db('host_drains').where({ id, status: 'running' }).update({ ...progress, updated_at: now })) === 1
}

/** Ends a running drain; false when it had ended already. */
export async function finishDrain(
  db: Queryable,
  id: string,
  end: { status: Exclude<DrainStatus, 'running'>; stopReason?: string; stoppedAtNodeId?: string | null },
  now: Date,
): Promise<boolean> {
  const changed = await db('host_drains')
    .where({ id, status: 'running' })
    .update({
      status: end.status,
      stop_reason: end.stopReason?.slice(0, 1000) ?? null,
      stopped_at_node_id: end.stoppedAtNodeId ?? null,
      current_node_id: null,
      activity: null,
      updated_at: now,
      finished_at: now,
    })
  return changed === 1
}
