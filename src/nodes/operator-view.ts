/**
 * What an operator sees of a node beyond the API's view (`nodeplane node show --wide`, read from
 * the control-plane database, so only someone holding its credentials gets it): the latest
 * report of the node's agent, with the chain process's pid on the host. The pid is host-internal
 * like the host columns, so no API answer carries it (docs/http.md, Nodes).
 */
import { toDateOrNull } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { findNodeView, type NodeView } from './views.js'

export interface NodeAgentReport {
  /** When the gateway received the latest heartbeat; null: no agent has reported yet. */
  reported_at: string | null
  agent_version: string | null
  process_state: string | null
  /** The chain process's pid on the node's host; null when none runs or the agent is older. */
  chain_pid: number | null
  restarts_in_window: number | null
}

export interface OperatorNodeView extends NodeView {
  agent: NodeAgentReport
}

export async function findOperatorNodeView(db: Queryable, id: string): Promise<OperatorNodeView | undefined> {
  const node = await findNodeView(db, { kind: 'all' }, id)
  if (!node) return undefined
  const report = (await db('agent_status').where({ node_id: node.id }).first('reported_at', 'agent_version', 'process_state', 'chain_pid', 'restarts_in_window')) as
    | { reported_at: unknown; agent_version: string | null; process_state: string | null; chain_pid: number | string | null; restarts_in_window: number | string | null }
    | undefined
  return {
    ...node,
    agent: {
      reported_at: toDateOrNull(report?.reported_at)?.toISOString() ?? null,
      agent_version: report?.agent_version ?? null,
      process_state: report?.process_state ?? null,
      chain_pid: report?.chain_pid === null || report?.chain_pid === undefined ? null : Number(report.chain_pid),
      restarts_in_window: report?.restarts_in_window === null || report?.restarts_in_window === undefined ? null : Number(report.restarts_in_window),
    },
  }
}
