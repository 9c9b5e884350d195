/**
 * `node provision|migrate|terminate`: the admin API call each makes (POST
 * /api/v1/admin/nodes/{id}/…), and the line each prints. The `--direct-db` path calls the same
 * domain functions the routes do, so both answer the same `--json`.
 */
import type { ApiClient } from './api-client.js'
import { resolveApiId } from './id-prefix.js'
import type { SubscriptionStatus } from '../subscriptions/views.js'

export interface NodeWorkflowResult {
  node_id: string
  workflow: string
  run_id: string
  created: boolean
  status: string
}

export interface NodeTerminateResult extends NodeWorkflowResult {
  subscription_id: string
  subscription_status: SubscriptionStatus
  subscription_ended: boolean
  /** Other nodes of the subscription whose termination this call started (--end-subscription). */
  other_nodes: string[]
}

export type NodeAction = 'provision' | 'migrate' | 'terminate'

/** Sends the action for the node `given` names (an id or a prefix of one the key can see). */
export async function nodeActionOverApi<T extends NodeWorkflowResult>(api: ApiClient, given: string, action: NodeAction, body?: Record<string, unknown>): Promise<T> {
  const id = await resolveApiId(api, 'node', given)
  return api.post<T>(`/admin/nodes/${encodeURIComponent(id)}/${action}`, body)
}

const ACTIVITY: Record<NodeAction, [string, string]> = {
  provision: ['provision', 'already started'],
  migrate: ['migration', 'already running'],
  terminate: ['termination', 'already started'],
}

export function describeNodeWorkflow(action: NodeAction, result: NodeWorkflowResult): string {
  const [what, again] = ACTIVITY[action]
  return `${result.created ? 'started' : again}: ${what} of node ${result.node_id} (run ${result.run_id}, ${result.status})`
}
