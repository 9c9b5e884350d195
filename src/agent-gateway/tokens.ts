/**
 * Per-node agent tokens (issue 4): `npt_` + 43 base64url characters, created at provisioning and
 * handed to the host once; only the SHA-256 is stored. A gateway checks the token of every call
 * against the node's current row, compared in constant time.
 */
import { isUuid } from '../db/ids.js'
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import { toDateOrNull } from '../db/dialect.js'
import { UnauthorizedError } from '../errors.js'
import { isTerminalState, type NodeState, type SyncStatus } from '../nodes/states.js'

export const AGENT_TOKEN_PREFIX = 'npt_'
const TOKEN_SHAPE = /^npt_[A-Za-z0-9_-]{43}$/

export function hashAgentToken(token: string): string {
  return crypto.createHash('sha256').update(token, 'utf8').digest('hex')
}

/** Creates (or replaces) the node's token; the plaintext is returned once and never stored. */
export async function createAgentToken(db: Queryable, nodeId: string, now: Date = new Date()): Promise<string> {
  const token = AGENT_TOKEN_PREFIX + crypto.randomBytes(32).toString('base64url')
  await db('agent_tokens')
    .insert({ node_id: nodeId, token_hash: hashAgentToken(token), created_at: now, revoked_at: null })
    .onConflict('node_id')
    .merge(['token_hash', 'created_at', 'revoked_at'])
  return token
}

export async function revokeAgentToken(db: Queryable, nodeId: string, now: Date = new Date()): Promise<void> {
  await db('agent_tokens').where({ node_id: nodeId }).whereNull('revoked_at').update({ revoked_at: now })
}

export interface AuthenticatedAgent {
  nodeId: string
  state: NodeState
}

/**
 * Resolves a node id and token to the node, or throws UnauthorizedError with one message for
 * every kind of mismatch, so a caller cannot tell an unknown node from a wrong token.
 */
export async function authenticateAgent(db: Queryable, nodeId: string | undefined, token: string | undefined): Promise<AuthenticatedAgent> {
  const [result] = await authenticateAgents(db, [{ nodeId, token }])
  if (!result || result instanceof UnauthorizedError) throw result ?? refusal()
  return { nodeId: result.nodeId, state: result.state }
}

/** An authenticated agent with its node's sync_status as stored (what a new stream starts from). */
export interface ConnectingAgent extends AuthenticatedAgent {
  syncStatus: SyncStatus
}

/** Node ids per statement: well under both databases' bind-parameter limits. */
const IDS_PER_STATEMENT = 500

/**
 * authenticateAgent for many calls at once (streams opening together, e.g. after a gateway
 * restart): one read per 500 nodes instead of one per call; each answer in the order asked,
 * the agent or the same UnauthorizedError for every kind of mismatch.
 */
export async function authenticateAgents(
  db: Queryable,
  credentials: readonly { nodeId: string | undefined; token: string | undefined }[],
): Promise<Array<ConnectingAgent | UnauthorizedError>> {
  const wellFormed = credentials.map((c) => (c.nodeId && c.token && isUuid(c.nodeId) && TOKEN_SHAPE.test(c.token) ? c.nodeId.toLowerCase() : undefined))
  const ids = [...new Set(wellFormed.filter((id): id is string => id !== undefined))]
  const rows = new Map<string, TokenRow>()
  for (let i = 0; i < ids.length; i += IDS_PER_STATEMENT) {
    const found = (await db('agent_tokens as t')
      .join('nodes as n', 'n.id', 't.node_id')
      .whereIn('t.node_id', ids.slice(i, i + IDS_PER_STATEMENT))
      .select('t.node_id', 't.token_hash', 't.revoked_at', 'n.state', 'n.sync_status')) as TokenRow[]
    for (const row of found) rows.set(String(row.node_id).toLowerCase(), row)
  }
  return credentials.map((c, i) => {
    const nodeId = wellFormed[i]
    // Hashed and compared even for an unknown node, so the answer takes the same time.
    const row = nodeId ? rows.get(nodeId) : undefined
    const presented = Buffer.from(hashAgentToken(c.token ?? ''), 'hex')
    const stored = Buffer.from(row?.token_hash ?? '0'.repeat(64), 'hex')
    const matches = crypto.timingSafeEqual(presented, stored)
    if (!nodeId || !row || !matches || toDateOrNull(row.revoked_at) !== null) return refusal()
    return { nodeId, state: row.state, syncStatus: row.sync_status ?? 'unknown' }
  })
}

interface TokenRow {
  node_id: string
  token_hash: string
  revoked_at: unknown
  state: NodeState
  sync_status: SyncStatus | null
}

function refusal(): UnauthorizedError {
  return new UnauthorizedError('agent token refused', 'send metadata x-node-id and authorization: Bearer <node token>')
}

export function isRetiredNode(agent: AuthenticatedAgent): boolean {
  return isTerminalState(agent.state)
}
