/**
 * Placement of a node on the host fleet, with its capacity reservation (docs/infrastructure.md,
 * "Placement"). One call, one transaction:
 *
 * 1. A reservation with the host key already exists (a retried step): that placement, unchanged.
 * 2. Otherwise the region's `ready` hosts are locked (`FOR UPDATE` on Postgres, in id order so two
 *    placements never deadlock; SQLite transactions begin IMMEDIATE, one writer at a time), and
 *    each one's free capacity is read from its reservations under that lock.
 * 3. Hosts that cannot take the node's needs (cpu, memory, disk) are out, and so are hosts where
 *    the node already has another placement (a migration's new host is never its old one).
 * 4. Spread, then pack: fewest nodes of the same user and chain first; among equals the fullest
 *    host (so a fleet fills as few hosts as it can); then by name.
 * 5. The reservation row is written with the lowest free RPC port of the hosts' range.
 *
 * The row is the placement and the reservation at once, so a process killed before commit left
 * neither, and one killed after commit left both (the retry finds it by host key). Placements in
 * one region run one at a time, which costs a few milliseconds per node provisioned.
 */
import { toDate } from '../db/dialect.js'
import { lockRow } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import type { InstanceTypeNeeds } from './instance-types.js'
import { hostFromRow, type Host, type HostRow } from './store.js'

/** RPC ports of nodes on a fleet host by default: below Linux's ephemeral range (32768 up), as local chains. */
export const HOST_RPC_PORTS = { first: 10_000, last: 19_999 } as const

export interface PortRange {
  first: number
  last: number
}

export interface PlacementRequest {
  /** Names the placement: the provider's host key. */
  hostKey: string
  nodeId: string
  region: string
  instanceType: string
  needs: InstanceTypeNeeds
  /** The ports nodes' chains may take on a host (HOSTS_RPC_PORTS); default HOST_RPC_PORTS. */
  rpcPorts?: PortRange
}

export interface Reservation {
  host_key: string
  host_id: string
  node_id: string
  user_id: string
  chain_profile_id: string
  instance_type: string
  cpu: number
  memory_bytes: number
  disk_bytes: number
  rpc_port: number
  created_at: Date
}

export interface Placement {
  reservation: Reservation
  host: Host
}

interface ReservationRow extends Omit<Reservation, 'memory_bytes' | 'disk_bytes' | 'created_at'> {
  memory_bytes: number | string
  disk_bytes: number | string
  created_at: unknown
}

function reservationFromRow(row: ReservationRow): Reservation {
  return { ...row, cpu: Number(row.cpu), rpc_port: Number(row.rpc_port), memory_bytes: Number(row.memory_bytes), disk_bytes: Number(row.disk_bytes), created_at: toDate(row.created_at) }
}

export async function findReservation(db: Queryable, hostKey: string): Promise<Reservation | undefined> {
  const row = (await db('host_reservations').where({ host_key: hostKey }).first()) as ReservationRow | undefined
  return row ? reservationFromRow(row) : undefined
}

export async function reservationsOfNode(db: Queryable, nodeId: string): Promise<Reservation[]> {
  return ((await db('host_reservations').where({ node_id: nodeId }).orderBy('created_at')) as ReservationRow[]).map(reservationFromRow)
}

/**
 * The node's placement on one host, named as the `ssh` provider names it (`<fleet host id>/<host
 * key>`, as `nodes.host_id`); not the newest one: while a drain or migration holds a placement on
 * the host the node moves to, the node still runs on its old one.
 */
export async function reservationOnHost(db: Queryable, nodeId: string, hostId: string): Promise<Reservation | undefined> {
  return (await reservationsOfNode(db, nodeId)).find((r) => `${r.host_id}/${r.host_key}` === hostId)
}

/** Frees what the placement reserved; a placement already gone is not an error. */
export async function releaseReservation(db: Queryable, hostKey: string): Promise<boolean> {
  return (await db('host_reservations').where({ host_key: hostKey }).delete()) > 0
}

export interface HostUsage {
  cpu: number
  memory_bytes: number
  disk_bytes: number
  nodes: number
}

/** What the reservations on each host add up to. */
export async function usageByHost(db: Queryable, hostIds: readonly string[]): Promise<Map<string, HostUsage>> {
  if (hostIds.length === 0) return new Map()
  const rows = (await db('host_reservations')
    .whereIn('host_id', hostIds)
    .groupBy('host_id')
    .select('host_id')
    .sum({ cpu: 'cpu', memory_bytes: 'memory_bytes', disk_bytes: 'disk_bytes' })
    .count({ nodes: '*' })) as Array<{ host_id: string; cpu: unknown; memory_bytes: unknown; disk_bytes: unknown; nodes: unknown }>
  return new Map(rows.map((r) => [r.host_id, { cpu: Number(r.cpu ?? 0), memory_bytes: Number(r.memory_bytes ?? 0), disk_bytes: Number(r.disk_bytes ?? 0), nodes: Number(r.nodes) }]))
}

const EMPTY: HostUsage = { cpu: 0, memory_bytes: 0, disk_bytes: 0, nodes: 0 }

function fits(host: Host, used: HostUsage, needs: InstanceTypeNeeds): boolean {
  return used.cpu + needs.cpu <= host.capacity.cpu && used.memory_bytes + needs.memory_bytes <= host.capacity.memory_bytes && used.disk_bytes + needs.disk_bytes <= host.capacity.disk_bytes
}

/** The largest share of any of the host's capacities already reserved. */
function load(host: Host, used: HostUsage): number {
  return Math.max(used.cpu / host.capacity.cpu, used.memory_bytes / host.capacity.memory_bytes, used.disk_bytes / host.capacity.disk_bytes)
}

/**
 * Places the node and reserves its needs (see the header), or returns undefined when no ready
 * host of the region has room for it now.
 */
export async function placeNode(db: Db, request: PlacementRequest, now: Date = new Date()): Promise<Placement | undefined> {
  return db.transaction(async (trx) => {
    const existing = await findReservation(trx, request.hostKey)
    if (existing) {
      const host = hostFromRow((await trx('hosts').where({ id: existing.host_id }).first()) as HostRow)
      return { reservation: existing, host }
    }
    const owner = (await trx('nodes')
      .join('subscriptions', 'subscriptions.id', 'nodes.subscription_id')
      .where('nodes.id', request.nodeId)
      .first('subscriptions.user_id as user_id', 'nodes.chain_profile_id as chain_profile_id')) as { user_id: string; chain_profile_id: string } | undefined
    if (!owner) throw new Error(`node ${request.nodeId} does not exist`)

    const hosts = ((await lockRow(trx, trx('hosts').where({ region: request.region, state: 'ready' }).orderBy('id').select('*'))) as HostRow[]).map(hostFromRow)
    const usage = await usageByHost(
      trx,
      hosts.map((h) => h.id),
    )
    const ownNodes = (await trx('host_reservations').where({ node_id: request.nodeId }).select('host_id')) as Array<{ host_id: string }>
    const excluded = new Set(ownNodes.map((r) => r.host_id))
    const siblings = (await trx('host_reservations')
      .where({ user_id: owner.user_id, chain_profile_id: owner.chain_profile_id })
      .whereNot({ node_id: request.nodeId })
      .groupBy('host_id')
      .select('host_id')
      .count({ n: '*' })) as Array<{ host_id: string; n: unknown }>
    const siblingCount = new Map(siblings.map((s) => [s.host_id, Number(s.n)]))

    const candidates = hosts
      .filter((h) => !excluded.has(h.id) && fits(h, usage.get(h.id) ?? EMPTY, request.needs))
      .sort(
        (a, b) =>
          (siblingCount.get(a.id) ?? 0) - (siblingCount.get(b.id) ?? 0) ||
          load(b, usage.get(b.id) ?? EMPTY) - load(a, usage.get(a.id) ?? EMPTY) ||
          a.name.localeCompare(b.name),
      )
    const host = candidates[0]
    if (!host) return undefined

    const taken = new Set(((await trx('host_reservations').where({ host_id: host.id }).select('rpc_port')) as Array<{ rpc_port: number | string }>).map((r) => Number(r.rpc_port)))
    const ports = request.rpcPorts ?? HOST_RPC_PORTS
    let rpcPort = ports.first
    while (taken.has(rpcPort)) rpcPort += 1
    if (rpcPort > ports.last) throw new Error(`host ${host.name} has no free RPC port in ${ports.first}-${ports.last}`)

    const reservation: Reservation = {
      host_key: request.hostKey,
      host_id: host.id,
      node_id: request.nodeId,
      user_id: owner.user_id,
      chain_profile_id: owner.chain_profile_id,
      instance_type: request.instanceType,
      cpu: request.needs.cpu,
      memory_bytes: request.needs.memory_bytes,
      disk_bytes: request.needs.disk_bytes,
      rpc_port: rpcPort,
      created_at: now,
    }
    await trx('host_reservations').insert(reservation)
    return { reservation, host }
  })
}
