import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { resolveApiId, resolveDbId } from '../../src/cli/id-prefix.js'
import { describeTermination, describeTerminationOverApi } from '../../src/cli/node-termination.js'
import { describeNodeWorkflow, nodeActionOverApi, type NodeTerminateResult } from '../../src/cli/node-workflows.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { terminateNodeAsOperator } from '../../src/subscriptions/operator-termination.js'

export default class NodeTerminate extends BaseCommand<typeof NodeTerminate> {
  static override summary = "Start (or find) the node's terminate workflow (operator: an admin key; idempotent)"
  static override description = [
    'Through the admin API (POST /api/v1/admin/nodes/{id}/terminate); --direct-db acts on the control-plane database instead (break-glass).',
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
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<NodeTerminateResult> {
    const given = this.subject('node')
    const out = this.flags['direct-db'] ? await this.onDatabase(given) : await this.overApi(given)
    this.log(describeNodeWorkflow('terminate', out))
    if (out.subscription_ended) this.log(`subscription ${out.subscription_id} ended (terminated); the customer is notified${out.other_nodes.length > 0 ? `; its other nodes are terminating: ${out.other_nodes.join(', ')}` : ''}`)
    return out
  }

  private async overApi(given: string): Promise<NodeTerminateResult> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const endSubscription = this.flags['end-subscription']
    const id = await resolveApiId(api, 'node', given)
    await confirmDestructive(this.flags.yes, () => describeTerminationOverApi(api, id, endSubscription))
    return nodeActionOverApi<NodeTerminateResult>(api, id, 'terminate', { reason: this.flags.reason, end_subscription: endSubscription })
  }

  private async onDatabase(given: string): Promise<NodeTerminateResult> {
    const endSubscription = this.flags['end-subscription']
    return withControlPlaneDatabase(this.env(), async (db) => {
      const id = (await resolveDbId(db, 'nodes', 'node', 'node list', given)).toLowerCase()
      await confirmDestructive(this.flags.yes, () => describeTermination(db, id, endSubscription))
      const { run, created, ...subscription } = await terminateNodeAsOperator(db, { nodeId: id, reason: this.flags.reason, endSubscription })
      return { node_id: id, workflow: run.workflowName, run_id: run.id, created, status: run.status, ...subscription }
    })
  }
}
