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
import { isTerminalState, type NodeState } from '../nodes/states.js'

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
  const refused = new UnauthorizedError('agent token refused', 'send metadata x-node-id and authorization: Bearer <node token>')
  if (!nodeId || !token || !isUuid(nodeId) || !TOKEN_SHAPE.test(token)) throw refused
  const row = (await db('agent_tokens as t')
    .join('nodes as n', 'n.id', 't.node_id')
    .where('t.node_id', nodeId.toLowerCase())
    .first('t.token_hash', 't.revoked_at', 'n.state')) as { token_hash: string; revoked_at: unknown; state: NodeState } | undefined
  const presented = Buffer.from(hashAgentToken(token), 'hex')
  const stored = Buffer.from(row?.token_hash ?? '0'.repeat(64), 'hex')
  const matches = crypto.timingSafeEqual(presented, stored)
  if (!row || !matches || toDateOrNull(row.revoked_at) !== null) throw refused
  return { nodeId: nodeId.toLowerCase(), state: row.state }
}

export function isRetiredNode(agent: AuthenticatedAgent): boolean {
  return isTerminalState(agent.state)
}
