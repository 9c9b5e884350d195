/** The `hosts` table (migration 0014): one function per database operation, the caller's transaction. */
import { fromJson, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { TERMINAL_NODE_STATES } from '../nodes/states.js'
import type { HostState } from './host-states.js'

export interface HostCapacity {
  cpu: number
  memory_bytes: number
  disk_bytes: number
}

export type ProbeResult = 'ok' | 'unreachable' | 'host_key_mismatch' | 'failed'

/** A host as the API and `--json` show it (snake_case, as every API body). No key material. */
export interface Host {
  id: string
  name: string
  address: string
  port: number
  user: string
  region: string
  root_dir: string
  capacity: HostCapacity
  labels: Record<string, string>
  state: HostState
  host_key_fingerprint: string
  last_probe_at: string | null
  last_probe_result: ProbeResult | null
  last_probe_error: string | null
  version: number
  created_at: string
  updated_at: string
  removed_at: string | null
}

export interface NewHost {
  id: string
  name: string
  address: string
  port: number
  user: string
  region: string
  rootDir: string
  capacity: HostCapacity
  labels: Record<string, string>
  hostKeyFingerprint: string
  now: Date
}

export interface HostRow {
  id: string
  name: string
  address: string
  port: number
  ssh_user: string
  region: string
  root_dir: string
  capacity_cpu: number
  capacity_memory_bytes: number | string
  capacity_disk_bytes: number | string
  labels: unknown
  state: HostState
  host_key_fingerprint: string
  last_probe_at: unknown
  last_probe_result: ProbeResult | null
  last_probe_error: string | null
  version: number
  created_at: unknown
  updated_at: unknown
  removed_at: unknown
}

const iso = (value: unknown): string => toDate(value).toISOString()

export function hostFromRow(row: HostRow): Host {
  const probedAt = toDateOrNull(row.last_probe_at)
  const removedAt = toDateOrNull(row.removed_at)
  return {
    id: row.id,
    name: row.name,
    address: row.address,
    port: Number(row.port),
    user: row.ssh_user,
    region: row.region,
    root_dir: row.root_dir,
    capacity: { cpu: Number(row.capacity_cpu), memory_bytes: Number(row.capacity_memory_bytes), disk_bytes: Number(row.capacity_disk_bytes) },
    labels: fromJson<Record<string, string>>(row.labels),
    state: row.state,
    host_key_fingerprint: row.host_key_fingerprint,
    last_probe_at: probedAt ? probedAt.toISOString() : null,
    last_probe_result: row.last_probe_result,
    last_probe_error: row.last_probe_error,
    version: Number(row.version),
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
    removed_at: removedAt ? removedAt.toISOString() : null,
  }
}

export async function insertHost(db: Queryable, host: NewHost): Promise<Host> {
  await db('hosts').insert({
    id: host.id,
    name: host.name,
    address: host.address,
    port: host.port,
    ssh_user: host.user,
    region: host.region,
    root_dir: host.rootDir,
    capacity_cpu: host.capacity.cpu,
    capacity_memory_bytes: host.capacity.memory_bytes,
    capacity_disk_bytes: host.capacity.disk_bytes,
    labels: toJson(host.labels),
    state: 'ready',
    host_key_fingerprint: host.hostKeyFingerprint,
    last_probe_at: host.now,
    last_probe_result: 'ok',
    version: 1,
    created_at: host.now,
    updated_at: host.now,
  })
  return (await findHostById(db, host.id)) as Host
}

export async function findHostById(db: Queryable, id: string): Promise<Host | undefined> {
  const row = (await db('hosts').where({ id }).first()) as HostRow | undefined
  return row ? hostFromRow(row) : undefined
}

/** The host not removed with this name (names are unique among them). */
export async function findLiveHostByName(db: Queryable, name: string): Promise<Host | undefined> {
  const row = (await db('hosts').where({ name }).whereNot({ state: 'removed' }).first()) as HostRow | undefined
  return row ? hostFromRow(row) : undefined
}

/** The filters of a host listing as a query without select or order (for keyset pagination, by name). */
export function hostListQuery(db: Queryable, filters: { state?: HostState | undefined; region?: string | undefined }) {
  const q = db('hosts')
  if (filters.state) q.where({ state: filters.state })
  else q.whereNot({ state: 'removed' })
  if (filters.region) q.where({ region: filters.region })
  return q
}

export const HOST_LIST_ORDER = { sortColumn: 'name', idColumn: 'id' } as const

export async function listHosts(db: Queryable, filters: { state?: HostState | undefined; region?: string | undefined; includeRemoved?: boolean }): Promise<Host[]> {
  const q = db('hosts').select('*').orderBy([{ column: 'name' }, { column: 'id' }])
  if (filters.state) q.where({ state: filters.state })
  else if (!filters.includeRemoved) q.whereNot({ state: 'removed' })
  if (filters.region) q.where({ region: filters.region })
  return ((await q) as HostRow[]).map(hostFromRow)
}

/** Hosts the health probe visits: every host not removed. */
export async function hostsToProbe(db: Queryable): Promise<Host[]> {
  return listHosts(db, {})
}

/** Moves a host's state if it is still at `version` (optimistic lock); false when it changed meanwhile. */
export async function updateHostState(db: Queryable, host: Pick<Host, 'id' | 'version'>, state: HostState, now: Date): Promise<boolean> {
  const changed = await db('hosts')
    .where({ id: host.id, version: host.version })
    .update({ state, updated_at: now, version: host.version + 1, ...(state === 'removed' ? { removed_at: now } : {}) })
  return changed === 1
}

/** Records a probe's result; returns the host's failed probes in a row, this one included (0 after a success). */
export async function recordProbe(db: Queryable, id: string, result: ProbeResult, error: string | null, now: Date): Promise<number> {
  await db('hosts')
    .where({ id })
    .update({ last_probe_at: now, last_probe_result: result, last_probe_error: error?.slice(0, 500) ?? null, probe_failures: result === 'ok' ? 0 : db.raw('probe_failures + 1') })
  const row = (await db('hosts').where({ id }).first('probe_failures')) as { probe_failures: number | string } | undefined
  return Number(row?.probe_failures ?? 0)
}

/**
 * Live nodes on a host: those the `ssh` provider recorded there (`nodes.host_id` is
 * `<fleet host id>/<host key>`, docs/infrastructure.md) and those placed there whose host is not
 * recorded yet (a provisioning or a migration under way holds a reservation first).
 */
export async function countLiveNodesOnHost(db: Queryable, hostId: string): Promise<number> {
  const row = (await db('nodes')
    .whereNotIn('state', [...TERMINAL_NODE_STATES])
    .where((q) => {
      void q.where((r) => void r.where('provider', 'ssh').andWhere('host_id', 'like', `${hostId}/%`)).orWhereIn('id', db('host_reservations').where({ host_id: hostId }).select('node_id'))
    })
    .count({ n: '*' })
    .first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}
