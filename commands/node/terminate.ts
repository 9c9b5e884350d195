import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { requestTermination } from '../../src/provisioning/triggers.js'

export default class NodeTerminate extends BaseCommand<typeof NodeTerminate> {
  static override summary = "Start (or find) the node's terminate workflow (operator; directly in the database; idempotent)"
  static override description =
    'Best effort: stop the node, delete its keys, destroy its host, verify; a failing middle step is recorded and skipped, and the node always ends terminated. Running it again prints the run already started.'
  static override examples = ['<%= config.bin %> node terminate --node 0190f5c2-… --reason "abuse report 1234"']
  static override flags = {
    node: Flags.string({ description: 'node id', required: true }),
    reason: Flags.string({ description: 'recorded in the health events', default: 'terminated by an operator' }),
  }

  async run(): Promise<{ node_id: string; workflow: string; run_id: string; created: boolean; status: string }> {
    const result = await withControlPlaneDatabase(this.env(), (db) => requestTermination(db, this.flags.node, this.flags.reason))
    const out = { node_id: this.flags.node.toLowerCase(), workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
    this.log(`${result.created ? 'started' : 'already started'}: termination of node ${out.node_id} (run ${out.run_id}, ${out.status})`)
    return out
  }
}
