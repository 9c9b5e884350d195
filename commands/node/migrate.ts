import * as Flags from '@oclif/core/flags'
import { z } from 'zod'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { describeNodeWorkflow, nodeActionOverApi, type NodeWorkflowResult } from '../../src/cli/node-workflows.js'
import { lifecycleEnv, loadConfig } from '../../src/config/env.js'
import { requestMigration } from '../../src/provisioning/triggers.js'

const cooldownEnv = z.object({ MIGRATION_COOLDOWN: lifecycleEnv.MIGRATION_COOLDOWN })

export default class NodeMigrate extends BaseCommand<typeof NodeMigrate> {
  static override summary = 'Start (or find) a migration of the node to a new host (operator: an admin key; idempotent)'
  static override description =
    "Through the admin API (POST /api/v1/admin/nodes/{id}/migrate). A node in healthy, degraded or down moves to maintenance, gets a new host restored from its latest backup, and ends syncing; the old host is destroyed. While its migration runs, running this again prints that run. A new attempt within the migration cooldown (the api-server's MIGRATION_COOLDOWN, 1h) is refused with exit 4 unless --force. Follow it with `nodeplane workflow show <run_id>`. --direct-db acts on the control-plane database instead (break-glass; the cooldown is then this shell's MIGRATION_COOLDOWN)."
  static override examples = [
    '<%= config.bin %> node migrate 0190f5c2-… --reason "host lost its disk"',
    '<%= config.bin %> node migrate ID --force --json | jq -r .run_id',
  ]
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node', ['node']),
    force: Flags.boolean({ description: 'ignore the migration cooldown (not the state rules)', default: false }),
    reason: Flags.string({ description: 'recorded in the run and the health events', default: 'migrated by an operator' }),
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<NodeWorkflowResult> {
    const given = this.subject('node')
    const { force, reason } = this.flags
    const out = this.flags['direct-db']
      ? await this.onDatabase(given)
      : await nodeActionOverApi(apiClientFor(this.env(), this.flags['api-url']), given, 'migrate', { reason, force })
    this.log(describeNodeWorkflow('migrate', out))
    return out
  }

  private async onDatabase(given: string): Promise<NodeWorkflowResult> {
    const env = this.env()
    const { MIGRATION_COOLDOWN } = loadConfig(cooldownEnv, env)
    return withControlPlaneDatabase(env, async (db) => {
      const id = (await resolveDbId(db, 'nodes', 'node', 'node list', given)).toLowerCase()
      const result = await requestMigration(db, id, { reason: this.flags.reason, force: this.flags.force, cooldownMs: MIGRATION_COOLDOWN })
      return { node_id: id, workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
    })
  }
}
