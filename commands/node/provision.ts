import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { describeNodeWorkflow, nodeActionOverApi, type NodeWorkflowResult } from '../../src/cli/node-workflows.js'
import { requestProvision } from '../../src/provisioning/triggers.js'

export default class NodeProvision extends BaseCommand<typeof NodeProvision> {
  static override summary = "Start (or find) the node's provision workflow (operator: an admin key; idempotent)"
  static override description =
    'Through the admin API (POST /api/v1/admin/nodes/{id}/provision). The workflow key is the node id: running it again prints the run already started. A node that is not in state provisioning is left alone (the run ends "skipped"). Follow it with `nodeplane workflow show <run_id>`. --direct-db acts on the control-plane database instead (break-glass).'
  static override examples = ['<%= config.bin %> node provision 0190f5c2-…', '<%= config.bin %> node provision ID --json | jq -r .run_id', 'DATABASE_URL=postgres://… <%= config.bin %> node provision ID --direct-db']
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node', ['node']),
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<NodeWorkflowResult> {
    const given = this.subject('node')
    const out = this.flags['direct-db'] ? await this.onDatabase(given) : await nodeActionOverApi(apiClientFor(this.env(), this.flags['api-url']), given, 'provision')
    this.log(describeNodeWorkflow('provision', out))
    return out
  }

  private async onDatabase(given: string): Promise<NodeWorkflowResult> {
    return withControlPlaneDatabase(this.env(), async (db) => {
      const id = (await resolveDbId(db, 'nodes', 'node', 'node list', given)).toLowerCase()
      const result = await requestProvision(db, id)
      return { node_id: id, workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
    })
  }
}
