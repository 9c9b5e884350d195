/** Agent registrations: who is running on a node's host, and where its stream is. */
import type { Queryable } from '../db/knex.js'
import { toDate, toDateOrNull } from '../db/dialect.js'

export interface AgentRegistration {
  node_id: string
  agent_version: string
  binary_version: string | null
  hostname: string
  /** X25519 public key, base64: key material for this host is sealed to it. */
  public_key: string
  gateway_id: string
  registered_at: Date
  connected_at: Date | null
  disconnected_at: Date | null
}

export interface NewRegistration {
  nodeId: string
  agentVersion: string
  binaryVersion: string | null
  hostname: string
  publicKey: string
  gatewayId: string
}

export async function recordRegistration(db: Queryable, input: NewRegistration, now: Date = new Date()): Promise<void> {
  await db('agent_registrations')
    .insert({
      node_id: input.nodeId,
      agent_version: input.agentVersion,
      binary_version: input.binaryVersion,
      hostname: input.hostname,
      public_key: input.publicKey,
      gateway_id: input.gatewayId,
      registered_at: now,
      connected_at: null,
      disconnected_at: null,
    })
    .onConflict('node_id')
    .merge(['agent_version', 'binary_version', 'hostname', 'public_key', 'gateway_id', 'registered_at'])
}

export async function findRegistration(db: Queryable, nodeId: string): Promise<AgentRegistration | undefined> {
  const row = (await db('agent_registrations').where({ node_id: nodeId }).first()) as Record<string, unknown> | undefined
  if (!row) return undefined
  return {
    node_id: String(row.node_id),
    agent_version: String(row.agent_version),
    binary_version: (row.binary_version as string | null) ?? null,
    hostname: String(row.hostname),
    public_key: String(row.public_key),
    gateway_id: String(row.gateway_id),
    registered_at: toDate(row.registered_at),
    connected_at: toDateOrNull(row.connected_at),
    disconnected_at: toDateOrNull(row.disconnected_at),
  }
}

/** A registration made at or after `since` (the provision workflow's "wait for agent"). */
export async function registeredSince(db: Queryable, nodeId: string, since: Date): Promise<AgentRegistration | undefined> {
  const registration = await findRegistration(db, nodeId)
  return registration && registration.registered_at >= since ? registration : undefined
}

export async function markConnected(db: Queryable, nodeId: string, gatewayId: string, now: Date = new Date()): Promise<void> {
  await db('agent_registrations').where({ node_id: nodeId }).update({ gateway_id: gatewayId, connected_at: now, disconnected_at: null })
}

/** Only the gateway the agent last connected to records the disconnect. */
export async function markDisconnected(db: Queryable, nodeId: string, gatewayId: string, now: Date = new Date()): Promise<void> {
  await db('agent_registrations').where({ node_id: nodeId, gateway_id: gatewayId }).update({ disconnected_at: now })
}

/** Node ids per statement: well under both databases' bind-parameter limits. */
const IDS_PER_STATEMENT = 500

/** markConnected for many streams opened together: one statement per 500 nodes. */
export async function markManyConnected(db: Queryable, nodeIds: readonly string[], gatewayId: string, now: Date = new Date()): Promise<void> {
  for (let i = 0; i < nodeIds.length; i += IDS_PER_STATEMENT) {
    await db('agent_registrations').whereIn('node_id', nodeIds.slice(i, i + IDS_PER_STATEMENT)).update({ gateway_id: gatewayId, connected_at: now, disconnected_at: null })
  }
}

/** markDisconnected for many streams closed together (a gateway shutting down, a network cut). */
export async function markManyDisconnected(db: Queryable, nodeIds: readonly string[], gatewayId: string, now: Date = new Date()): Promise<void> {
  for (let i = 0; i < nodeIds.length; i += IDS_PER_STATEMENT) {
    await db('agent_registrations').whereIn('node_id', nodeIds.slice(i, i + IDS_PER_STATEMENT)).andWhere({ gateway_id: gatewayId }).update({ disconnected_at: now })
  }
}
