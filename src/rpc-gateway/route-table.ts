/**
 * The gateway's route table: node id -> where its RPC is now, whose node it is, whether it
 * serves and which method policy applies (docs/rpc-gateway.md, "Routing").
 *
 * The source of truth is the database: the node's row (state, host), its subscription's owner and
 * the RPC port of its latest completed `configure` (the port the chain was started with on its
 * current host). A route read from it is kept for RPC_GATEWAY_ROUTE_TTL and dropped earlier when
 * the node's health changes (`events.node.<id>.health_changed`, route-events.ts) or when its
 * address refuses a connection, so after a migration the next request reads the new host.
 * Nothing here must be unique to one process: any number of gateways keep their own tables.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ChainSource } from '../config/chain-source.js'
import { fromJson } from '../db/dialect.js'
import { isUuid } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import type { NodeState } from '../nodes/states.js'
import { compilePolicy, type MethodPolicy } from './policy.js'
import { UpstreamError } from './upstream.js'

/** States in which a node's RPC answers; every other one is refused with 503 (docs/rpc-gateway.md). */
export const SERVING_STATES: readonly NodeState[] = ['syncing', 'healthy', 'degraded']

export interface Upstream {
  /** `http://host:port/` */
  url: string
  /** The chain's RPC credential (a bitcoin-style cookie), if the chain needs one. */
  cookie?: CookieSource
}

/**
 * A chain's RPC cookie (Bitcoin Core's `__cookie__:<secret>`), rewritten by the chain at every
 * start. A `local` host's is a file on this machine, read per call. A fleet host's is read over
 * SSH once per route (a route lives RPC_GATEWAY_ROUTE_TTL) and again after the node refused it
 * (`forget`: the chain restarted and wrote a new one). Never logged.
 */
export interface CookieSource {
  read(): Promise<string>
  forget(): void
}

/** Reads a file of a fleet node's directory over SSH (`readFleetNodeFile`). */
export type FleetNodeFileReader = (hostId: string, relativePath: string, maxBytes: number) => Promise<string>

/** A cookie is `__cookie__:` and 64 hex digits; anything far larger is not one. */
const MAX_COOKIE_BYTES = 4_096

export interface NodeRoute {
  nodeId: string
  ownerId: string
  chainProfileId: string
  nodeType: string
  state: NodeState
  /** Null while the node has no host or no configured port yet. */
  upstream: Upstream | null
  policy: MethodPolicy
}

export interface RouteTableOptions {
  db: Queryable
  chains: ChainSource
  ttlMs: number
  /** Where `local` hosts live (LOCAL_HOSTS_DIR, default <data dir>/hosts): their chains' cookie files. */
  localHostsDir: string
  /** How fleet (`ssh`) hosts' files are read; without it a fleet node's cookie cannot be, and its calls fail (502). */
  fleetFiles?: FleetNodeFileReader
  now?: () => number
}

interface NodeRow {
  id: string
  state: NodeState
  chain_profile_id: string
  node_type: string
  host_id: string | null
  host_ip: string | null
  provider: string | null
  user_id: string
}

function hostPart(ip: string): string {
  return ip.includes(':') ? `[${ip}]` : ip
}

/** Reads one node's route from the database; undefined when there is no such node. */
export async function readRoute(options: Omit<RouteTableOptions, 'ttlMs'>, nodeId: string): Promise<NodeRoute | undefined> {
  const { db } = options
  const row = (await db('nodes as n')
    .join('subscriptions as s', 's.id', 'n.subscription_id')
    .where('n.id', nodeId)
    .first('n.id', 'n.state', 'n.chain_profile_id', 'n.node_type', 'n.host_id', 'n.host_ip', 'n.provider', 's.user_id')) as NodeRow | undefined
  if (!row) return undefined
  const configure = (await db('agent_commands')
    .where({ node_id: nodeId, type: 'configure', status: 'completed' })
    .orderBy('created_at', 'desc')
    .first('payload')) as { payload: unknown } | undefined
  const rpcPort = configure ? fromJson<{ rpc_port?: number }>(configure.payload).rpc_port : undefined
  const profile = options.chains.current().profiles.get(row.chain_profile_id)
  let upstream: Upstream | null = null
  if (row.host_ip && rpcPort) {
    upstream = { url: `http://${hostPart(row.host_ip)}:${rpcPort}/` }
    const cookie = profile?.probe?.type === 'bitcoin_rpc' ? profile.probe.cookie_file : undefined
    if (cookie && row.host_id) upstream.cookie = cookieSource(options, row.provider, row.host_id, `state/${cookie}`)
  }
  return {
    nodeId: row.id,
    ownerId: row.user_id,
    chainProfileId: row.chain_profile_id,
    nodeType: row.node_type,
    state: row.state,
    upstream,
    policy: compilePolicy(profile?.rpc, row.chain_profile_id, row.node_type),
  }
}

function cookieSource(options: Pick<RouteTableOptions, 'localHostsDir' | 'fleetFiles'>, provider: string | null, hostId: string, relativePath: string): CookieSource | undefined {
  if (provider === 'local') {
    const file = path.join(options.localHostsDir, hostId, relativePath)
    return { read: () => fs.readFile(file, 'utf8'), forget: () => undefined }
  }
  if (provider !== 'ssh') return undefined
  let cached: Promise<string> | undefined
  return {
    read() {
      const { fleetFiles } = options
      if (!fleetFiles) return Promise.reject(new UpstreamError('unreachable', "the chain's RPC cookie is on a fleet host and this gateway has no SSH access to hosts (HOSTS_SSH_KEY_DIR)"))
      cached ??= fleetFiles(hostId, relativePath, MAX_COOKIE_BYTES).catch((err: unknown) => {
        cached = undefined
        throw new UpstreamError('unreachable', `the chain's RPC cookie could not be read from its host: ${(err as Error).message}`)
      })
      return cached
    },
    forget() {
      cached = undefined
    },
  }
}

/** The `Authorization` a chain that wants its cookie gets (Bitcoin Core's `__cookie__:<secret>`). */
export async function upstreamAuthorization(upstream: Upstream): Promise<string | undefined> {
  if (!upstream.cookie) return undefined
  const cookie = (await upstream.cookie.read()).trim()
  return `Basic ${Buffer.from(cookie).toString('base64')}`
}

export class RouteTable {
  private readonly entries = new Map<string, { route: NodeRoute; until: number }>()
  private readonly loading = new Map<string, Promise<NodeRoute | undefined>>()
  private readonly now: () => number

  constructor(private readonly options: RouteTableOptions) {
    this.now = options.now ?? Date.now
  }

  /** The node's route, from the table while fresh; undefined for an unknown (or malformed) id. */
  async get(nodeId: string): Promise<NodeRoute | undefined> {
    if (!isUuid(nodeId)) return undefined
    const id = nodeId.toLowerCase()
    const cached = this.entries.get(id)
    if (cached && cached.until > this.now()) return cached.route
    // Concurrent requests for one node share one read.
    let load = this.loading.get(id)
    if (!load) {
      load = readRoute(this.options, id).then(
        (route) => {
          // Invalidated while reading: the read may predate the change, so it answers this
          // request but is not kept.
          const current = this.loading.get(id) === load
          if (current) this.loading.delete(id)
          if (route && current) this.entries.set(id, { route, until: this.now() + this.options.ttlMs })
          else if (!route) this.entries.delete(id)
          return route
        },
        (err: unknown) => {
          if (this.loading.get(id) === load) this.loading.delete(id)
          throw err
        },
      )
      this.loading.set(id, load)
    }
    return load
  }

  /** Forgets a node's route: its next request reads the database. */
  invalidate(nodeId: string): void {
    const id = nodeId.toLowerCase()
    this.entries.delete(id)
    // A read in flight may have seen the node before the change: the next request reads again.
    this.loading.delete(id)
  }

  get size(): number {
    return this.entries.size
  }
}
