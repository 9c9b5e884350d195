/**
 * `nodeplane node terminate` (issue 22, item 6; docs/subscriptions.md, "Operator termination"):
 * an operator terminating the live node of a subscription the customer still pays for
 * (`active`, or `expiring` within its grace period) would leave it with nothing behind it. So
 * that is refused unless the operator also ends the subscription (`endSubscription`): the
 * subscription moves to `terminated` (from `active` an extension of the spec's table), its
 * secret inputs are deleted, every node of it not yet terminated gets its terminate workflow,
 * and the customer gets a `subscription_terminated` notification — all in one transaction, with
 * the subscription row locked so a payment or the cleanup cannot move it meanwhile. To replace
 * a node and keep the subscription, operators migrate it (`nodeplane node migrate`).
 *
 * A node whose terminate run exists already answers that run (idempotent), whatever the flags.
 */
import { lockRow } from '../db/dialect.js'
import { isUuid } from '../db/ids.js'
import type { Db, Tx } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { findNode } from '../nodes/node-store.js'
import { isTerminalState } from '../nodes/states.js'
import { createNotification } from '../notifications/notifications.js'
import { requestTermination } from '../provisioning/triggers.js'
import { TERMINATE_WORKFLOW } from '../provisioning/workflow-names.js'
import { findRunByKey, type WorkflowRun } from '../workflows/index.js'
import { deleteSealedInputs } from './inputs.js'
import { transitionSubscription } from './lifecycle.js'
import type { SubscriptionStatus } from './views.js'

/** Statuses in which the customer has paid for a running node. */
const PAID_STATUSES: readonly SubscriptionStatus[] = ['active', 'expiring']

export interface OperatorTerminationRequest {
  nodeId: string
  reason: string
  /** End the node's subscription with it (the customer is notified). */
  endSubscription: boolean
  now?: Date
}

export interface OperatorTerminationResult {
  run: WorkflowRun
  created: boolean
  subscription_id: string
  /** The subscription's status after the call. */
  subscription_status: SubscriptionStatus
  /** This call moved the subscription to terminated. */
  subscription_ended: boolean
  /** Other nodes of the subscription whose terminate workflow this call started. */
  other_nodes: string[]
}

interface SubscriptionRow {
  id: string
  user_id: string
  chain_profile_id: string
  node_type: string
  status: SubscriptionStatus
  version: number | string
}

export async function terminateNodeAsOperator(db: Db, request: OperatorTerminationRequest): Promise<OperatorTerminationResult> {
  if (!isUuid(request.nodeId)) throw new ValidationError(`"${request.nodeId.slice(0, 60)}" is not a node id (UUID)`)
  const nodeId = request.nodeId.toLowerCase()
  const now = request.now ?? new Date()
  return db.transaction(async (trx) => {
    const node = await findNode(trx, nodeId)
    if (!node) throw new NotFoundError(`node ${nodeId} not found`, 'list the nodes with `nodeplane node list`')
    const sub = (await lockRow(trx, trx('subscriptions').where({ id: node.subscription_id }).first('id', 'user_id', 'chain_profile_id', 'node_type', 'status', 'version'))) as
      | SubscriptionRow
      | undefined
    if (!sub) throw new NotFoundError(`subscription ${node.subscription_id} of node ${nodeId} not found`)
    const unchanged = { subscription_id: sub.id, subscription_status: sub.status, subscription_ended: false, other_nodes: [] }

    const existing = await findRunByKey(trx, TERMINATE_WORKFLOW, nodeId)
    if (existing) return { run: existing, created: false, ...unchanged }

    const paid = PAID_STATUSES.includes(sub.status)
    if (paid && request.endSubscription) return endSubscriptionWithNode(trx, sub, nodeId, request.reason, now)
    if (paid && !isTerminalState(node.state)) {
      throw new ConflictError(
        `node ${nodeId} is the node of subscription ${sub.id}, which is ${sub.status}: terminating it alone would leave the customer paying for no node`,
        `to replace the node and keep the subscription, run \`nodeplane node migrate --node ${nodeId}\`; to end the subscription with it (the customer is notified), add --end-subscription`,
      )
    }
    const started = await requestTermination(trx, nodeId, request.reason, now)
    return { run: started.run, created: started.created, ...unchanged }
  })
}

async function endSubscriptionWithNode(trx: Tx, sub: SubscriptionRow, nodeId: string, reason: string, now: Date): Promise<OperatorTerminationResult> {
  await transitionSubscription(trx, { id: sub.id, from: sub.status, to: 'terminated', expectedVersion: Number(sub.version), now })
  await deleteSealedInputs(trx, [sub.id])
  const started = await requestTermination(trx, nodeId, reason, now)
  const others = (await trx('nodes').where({ subscription_id: sub.id }).whereNot('state', 'terminated').whereNot('id', nodeId).orderBy('id').pluck('id')) as string[]
  const otherStarted: string[] = []
  for (const other of others) {
    if ((await requestTermination(trx, other, reason, now)).created) otherStarted.push(other)
  }
  await createNotification(
    trx,
    {
      userId: sub.user_id,
      kind: 'subscription_terminated',
      title: 'Subscription terminated',
      body: `Your ${sub.chain_profile_id} ${sub.node_type} subscription ${sub.id} was ended by our operators: ${reason}. Its node is being terminated and the keys deleted.`,
      data: { subscription_id: sub.id, nodes: 1 + others.length, ended_by: 'operator', reason },
    },
    now,
  )
  return { run: started.run, created: started.created, subscription_id: sub.id, subscription_status: 'terminated', subscription_ended: true, other_nodes: otherStarted }
}
