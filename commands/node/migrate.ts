import * as Flags from '@oclif/core/flags'
import { z } from 'zod'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { resolveDbId } from '../../src/cli/id-prefix.js'
import { lifecycleEnv, loadConfig } from '../../src/config/env.js'
import { requestMigration } from '../../src/provisioning/triggers.js'

const cooldownEnv = z.object({ MIGRATION_COOLDOWN: lifecycleEnv.MIGRATION_COOLDOWN })

export default class NodeMigrate extends BaseCommand<typeof NodeMigrate> {
  static override summary = 'Start (or find) a migration of the node to a new host (operator; directly in the database; idempotent)'
  static override description =
    'A node in healthy, degraded or down moves to maintenance, gets a new host restored from its latest backup, and ends syncing; the old host is destroyed. While its migration runs, running this again prints that run. A new attempt within the migration cooldown (MIGRATION_COOLDOWN, 1h) is refused with exit 4 unless --force. Follow it with `nodeplane workflow show --id <run_id>`.'
  static override examples = [
    '<%= config.bin %> node migrate 0190f5c2-… --reason "host lost its disk"',
    '<%= config.bin %> node migrate ID --force --json | jq -r .run_id',
  ]
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node', ['node']),
    force: Flags.boolean({ description: 'ignore the migration cooldown (not the state rules)', default: false }),
    reason: Flags.string({ description: 'recorded in the run and the health events', default: 'migrated by an operator' }),
  }

  async run(): Promise<{ node_id: string; workflow: string; run_id: string; created: boolean; status: string }> {
    const given = this.subject('node')
    let id = given
    const env = this.env()
    const { MIGRATION_COOLDOWN } = loadConfig(cooldownEnv, env)
    const result = await withControlPlaneDatabase(env, async (db) => {
      id = await resolveDbId(db, 'nodes', 'node', 'node list', given)
      return requestMigration(db, id, { reason: this.flags.reason, force: this.flags.force, cooldownMs: MIGRATION_COOLDOWN })
    })
    const out = { node_id: id.toLowerCase(), workflow: result.run.workflowName, run_id: result.run.id, created: result.created, status: result.run.status }
    this.log(`${result.created ? 'started' : 'already running'}: migration of node ${out.node_id} (run ${out.run_id}, ${out.status})`)
    return out
  }
}
