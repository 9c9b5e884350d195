import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { requestProvision } from '../../src/provisioning/triggers.js'

export default class NodeProvision extends BaseCommand<typeof NodeProvision> {
  static override summary = "Start (or find) the node's provision workflow (operator; directly in the database; idempotent)"
  static override description =
    'The workflow key is the node id: running it again prints the run already started. A node that is not in state provisioning is left alone (the run ends "skipped"). Follow it with `nodeplane workflow show --id <run_id>`.'
  static override examples = ['<%= config.bin %> node provision 0190f5c2-…', '<%= config.bin %> node provision ID --json | jq -r .run_id']
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node', ['node']),
  }

  async run(): Promise<{ node_id: string; workflow: string; run_id: string; created: boolean; status: string }> {
    const given = this.subject('node')
    let id = given
    const result = await withControlPlaneDatabase(this.env(), async (db) => {
      id = await resolveDbId(db, 'nodes', 'node', 'node list', given)
      return requestProvision(db, id)
    })
    const out = { node_id: id.toLowerCase(), workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
    this.log(`${result.created ? 'started' : 'already started'}: provision of node ${out.node_id} (run ${out.run_id}, ${out.status})`)
    return out
  }
}
