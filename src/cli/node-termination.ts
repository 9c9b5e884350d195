/**
 * What `node terminate` asks before it acts: the node named with its chain, state and
 * subscription. Nothing is asked when the command would not act (an unknown node, a termination
 * already started, a paid subscription's live node without --end-subscription): the domain
 * answers those, so a refusal comes before a question. The same rule over the admin API and on
 * the database (`--direct-db`); only how the facts are read differs.
 */
import { isUuid } from '../db/ids.js'
import type { Db } from '../db/knex.js'
import { NotFoundError } from '../errors.js'
import { findNode } from '../nodes/node-store.js'
import { isTerminalState, type NodeState } from '../nodes/states.js'
import { TERMINATE_WORKFLOW } from '../provisioning/workflow-names.js'
import { findRunByKey } from '../workflows/index.js'
import type { ApiClient } from './api-client.js'
import type { Confirmation } from './prompt.js'
import type { Page } from './views.js'

const PAID = ['active', 'expiring']

interface TerminationFacts {
  node: { id: string; chain_profile_id: string; node_type: string; state: NodeState }
  subscription: { id: string; status: string }
  /** A terminate run exists already (the call will answer it). */
  started: boolean
}

function confirmationFor(facts: TerminationFacts | undefined, endSubscription: boolean): Confirmation | undefined {
  if (!facts || facts.started) return undefined
  const { node, subscription: sub } = facts
  const paid = PAID.includes(sub.status)
  if (paid && !endSubscription && !isTerminalState(node.state)) return undefined
  return {
    action: `terminate node ${node.id} (${node.chain_profile_id} ${node.node_type}, ${node.state}; subscription ${sub.id} ${sub.status})`,
    consequence: paid && endSubscription ? 'Its host is destroyed, its keys deleted, and the subscription ends (the customer is notified)' : 'Its host is destroyed and its keys deleted',
  }
}

export async function describeTermination(db: Db, nodeId: string, endSubscription: boolean): Promise<Confirmation | undefined> {
  if (!isUuid(nodeId)) return undefined
  const node = await findNode(db, nodeId.toLowerCase())
  if (!node) return undefined
  const sub = (await db('subscriptions').where({ id: node.subscription_id }).first('id', 'status')) as { id: string; status: string } | undefined
  if (!sub) return undefined
  const started = (await findRunByKey(db, TERMINATE_WORKFLOW, node.id)) !== null
  return confirmationFor({ node, subscription: sub, started }, endSubscription)
}

/** The same facts through the API (an admin key reads any node, subscription and run). */
export async function describeTerminationOverApi(api: ApiClient, nodeId: string, endSubscription: boolean): Promise<Confirmation | undefined> {
  if (!isUuid(nodeId)) return undefined
  const node = await api.get<TerminationFacts['node'] & { subscription_id: string }>(`/nodes/${encodeURIComponent(nodeId)}`).catch(undefinedIfNotFound)
  if (!node) return undefined
  const sub = await api.get<TerminationFacts['subscription']>(`/subscriptions/${encodeURIComponent(node.subscription_id)}`).catch(undefinedIfNotFound)
  if (!sub) return undefined
  const runs = await api.get<Page<unknown>>('/admin/workflow-runs', { workflow: TERMINATE_WORKFLOW, key: node.id, limit: 1 })
  return confirmationFor({ node, subscription: sub, started: runs.items.length > 0 }, endSubscription)
}

/** An unknown node is the action's own 404 to give, with its own message. */
function undefinedIfNotFound(err: unknown): undefined {
  if (err instanceof NotFoundError) return undefined
  throw err
}
