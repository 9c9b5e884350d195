import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { listAll } from '../../src/cli/pages.js'
import { currentSteps, listRuns, RUN_STATUSES, toRunView, type RunStatus, type WorkflowRunView } from '../../src/workflows/index.js'

export default class WorkflowList extends BaseCommand<typeof WorkflowList> {
  static override summary = 'List workflow runs (operator: an admin key), newest first'
  static override description = 'Through the admin API (GET /api/v1/admin/workflow-runs); --direct-db reads the control-plane database instead (break-glass).'
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
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<{ runs: WorkflowRunView[] }> {
    const { status, name, limit } = this.flags
    const runs = this.flags['direct-db']
      ? await withControlPlaneDatabase(this.env(), async (db) => {
          const found = await listRuns(db, { limit, ...(status ? { status: status as RunStatus } : {}), ...(name ? { name } : {}) })
          const steps = await currentSteps(db, found)
          return found.map((run) => toRunView(run, steps.get(run.id)))
        })
      : await listAll<WorkflowRunView>(apiClientFor(this.env(), this.flags['api-url']), `/admin/workflow-runs?${new URLSearchParams({ ...(status ? { status } : {}), ...(name ? { workflow: name } : {}) }).toString()}`, limit)
    if (!this.jsonEnabled()) {
      this.log(
        runs.length === 0
          ? 'No workflow runs.'
          : renderTable(runs, [
              { header: 'id', value: (r) => r.id, id: true },
              { header: 'workflow', value: (r) => r.workflow },
              { header: 'key', value: (r) => r.key },
              { header: 'status', value: (r) => r.status, state: true },
              { header: 'step', value: (r) => r.current_step ?? '-' },
              { header: 'attempts', value: (r) => String(r.attempts) },
              { header: 'created', value: (r) => age(r.created_at) },
              { header: 'error', value: (r) => (r.error ?? '').slice(0, 80) },
            ]),
      )
    }
    return { runs }
  }
}
