/**
 * What `node terminate` asks before it acts: the node named with its chain, state and
 * subscription. Nothing is asked when the command would not act (an unknown node, a termination
 * already started, a paid subscription's live node without --end-subscription): the domain
 * answers those, so a refusal comes before a question.
 */
import { isUuid } from '../db/ids.js'
import type { Db } from '../db/knex.js'
import { findNode } from '../nodes/node-store.js'
import { isTerminalState } from '../nodes/states.js'
import { TERMINATE_WORKFLOW } from '../provisioning/workflow-names.js'
import { findRunByKey } from '../workflows/index.js'
import type { Confirmation } from './prompt.js'

const PAID = ['active', 'expiring']

export async function describeTermination(db: Db, nodeId: string, endSubscription: boolean): Promise<Confirmation | undefined> {
  if (!isUuid(nodeId)) return undefined
  const node = await findNode(db, nodeId.toLowerCase())
  if (!node) return undefined
  if (await findRunByKey(db, TERMINATE_WORKFLOW, node.id)) return undefined
  const sub = (await db('subscriptions').where({ id: node.subscription_id }).first('id', 'status')) as { id: string; status: string } | undefined
  if (!sub) return undefined
  const paid = PAID.includes(sub.status)
  if (paid && !endSubscription && !isTerminalState(node.state)) return undefined
  return {
    action: `terminate node ${node.id} (${node.chain_profile_id} ${node.node_type}, ${node.state}; subscription ${sub.id} ${sub.status})`,
    consequence: paid && endSubscription ? 'Its host is destroyed, its keys deleted, and the subscription ends (the customer is notified)' : 'Its host is destroyed and its keys deleted',
  }
}
