import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { yesFlag } from '../../src/cli/api-flags.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { describeTermination } from '../../src/cli/node-termination.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { terminateNodeAsOperator } from '../../src/subscriptions/operator-termination.js'
import type { SubscriptionStatus } from '../../src/subscriptions/views.js'

export interface NodeTerminateResult {
  node_id: string
  workflow: string
  run_id: string
  created: boolean
  status: string
  subscription_id: string
  subscription_status: SubscriptionStatus
  subscription_ended: boolean
  /** Other nodes of the subscription whose termination this call started (--end-subscription). */
  other_nodes: string[]
}

export default class NodeTerminate extends BaseCommand<typeof NodeTerminate> {
  static override summary = "Start (or find) the node's terminate workflow (operator; directly in the database; idempotent)"
  static override description = [
    'Best effort: stop the node, delete its keys, destroy its host, verify; a failing middle step is recorded and skipped, and the node always ends terminated. Running it again prints the run already started.',
    'Asks for confirmation on a terminal, naming the node, unless --yes (without a terminal, --yes is required).',
    'The live node of a subscription the customer pays for (active, or expiring in its grace period) is not terminated alone (exit 4): add --end-subscription to end the subscription with it (the customer is notified), or replace the node with `nodeplane node migrate`.',
  ].join('\n\n')
  static override examples = [
    '<%= config.bin %> node terminate 0190f5c2-… --reason "abuse report 1234" --end-subscription --yes',
    '<%= config.bin %> node terminate "$FAILED_NODE" --reason "clean up the failed host" --yes',
  ]
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node', ['node']),
    reason: Flags.string({ description: 'recorded in the health events (and, with --end-subscription, told to the customer)', default: 'terminated by an operator' }),
    yes: yesFlag,
    'end-subscription': Flags.boolean({ description: "end the node's active subscription too (terminated; the customer gets a subscription_terminated notification)", default: false }),
  }

  async run(): Promise<NodeTerminateResult> {
    const given = this.subject('node')
    let id = given
    const result = await withControlPlaneDatabase(this.env(), async (db) => {
      id = await resolveDbId(db, 'nodes', 'node', 'node list', given)
      await confirmDestructive(this.flags.yes, () => describeTermination(db, id, this.flags['end-subscription']))
      return terminateNodeAsOperator(db, { nodeId: id, reason: this.flags.reason, endSubscription: this.flags['end-subscription'] })
    })
    const out: NodeTerminateResult = {
      node_id: id.toLowerCase(),
      workflow: result.run.workflowName,
      run_id: result.run.id,
      created: result.created,
      status: result.run.status,
      subscription_id: result.subscription_id,
      subscription_status: result.subscription_status,
      subscription_ended: result.subscription_ended,
      other_nodes: result.other_nodes,
    }
    this.log(`${result.created ? 'started' : 'already started'}: termination of node ${out.node_id} (run ${out.run_id}, ${out.status})`)
    if (out.subscription_ended) this.log(`subscription ${out.subscription_id} ended (terminated); the customer is notified${out.other_nodes.length > 0 ? `; its other nodes are terminating: ${out.other_nodes.join(', ')}` : ''}`)
    return out
  }
}
