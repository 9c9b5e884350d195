import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { columnsFlag, renderTable, shortTime } from '../../src/cli/display.js'
import { currentSteps, listRuns, RUN_STATUSES, toRunView, type RunStatus, type WorkflowRunView } from '../../src/workflows/index.js'

export default class WorkflowList extends BaseCommand<typeof WorkflowList> {
  static override summary = 'List workflow runs (directly from the database), newest first'
  static override examples = [
    '<%= config.bin %> workflow list',
    '<%= config.bin %> workflow list --status failed --json | jq -r ".runs[].id"',
    '<%= config.bin %> workflow list --name provision --limit 10',
  ]
  static override aliases = ['workflow:ls']
  static override flags = {
    columns: columnsFlag,
    status: Flags.string({ description: 'only runs in this status', options: [...RUN_STATUSES] }),
    name: Flags.string({ description: 'only runs of this workflow' }),
    limit: Flags.integer({ description: 'at most this many runs', default: 50, min: 1, max: 1000 }),
  }

  async run(): Promise<{ runs: WorkflowRunView[] }> {
    const runs = await withControlPlaneDatabase(this.env(), async (db) => {
      const found = await listRuns(db, {
        limit: this.flags.limit,
        ...(this.flags.status ? { status: this.flags.status as RunStatus } : {}),
        ...(this.flags.name ? { name: this.flags.name } : {}),
      })
      const steps = await currentSteps(db, found)
      return found.map((run) => toRunView(run, steps.get(run.id)))
    })
    if (!this.jsonEnabled()) {
      this.log(
        runs.length === 0
          ? 'No workflow runs.'
          : renderTable(runs, [
              { header: 'id', value: (r) => r.id },
              { header: 'workflow', value: (r) => r.workflow },
              { header: 'key', value: (r) => r.key },
              { header: 'status', value: (r) => r.status },
              { header: 'step', value: (r) => r.current_step ?? '-' },
              { header: 'attempts', value: (r) => String(r.attempts) },
              { header: 'created', value: (r) => shortTime(r.created_at) },
              { header: 'error', value: (r) => (r.error ?? '').slice(0, 80) },
            ]),
      )
    }
    return { runs }
  }
}
