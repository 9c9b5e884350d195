import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { directDbFlag } from '../../src/cli/direct-db.js'
import { resolveApiId, resolveDbId } from '../../src/cli/id-prefix.js'
import { renderTable } from '../../src/cli/display.js'
import { age, ahead, moment, took } from '../../src/cli/human-time.js'
import { NotFoundError } from '../../src/errors.js'
import { getRun, listSteps, toRunView, toStepView, type WorkflowRunDetail } from '../../src/workflows/index.js'

export default class WorkflowShow extends BaseCommand<typeof WorkflowShow> {
  static override summary = 'Show one workflow run: status, current step, attempts, last error, and every step (operator: an admin key)'
  static override description = 'Through the admin API (GET /api/v1/admin/workflow-runs/{id}); --direct-db reads the control-plane database instead (break-glass). An unknown run exits 3.'
  static override examples = ['<%= config.bin %> workflow show 0190f1c2-…', '<%= config.bin %> workflow show ID --json | jq ".steps[] | select(.status == \\"failed\\")"']
  static override args = { id: subjectArg('workflow run') }
  static override flags = {
    id: subjectFlag('workflow run'),
    'api-url': apiUrlFlag,
    'direct-db': directDbFlag,
  }

  async run(): Promise<WorkflowRunDetail> {
    const id = this.subject('workflow run')
    const detail = this.flags['direct-db'] ? await this.onDatabase(id) : await this.overApi(id)
    if (!this.jsonEnabled()) {
      this.log(`${detail.workflow} ${detail.key} (${detail.id})`)
      this.log(`  status:       ${detail.status}${detail.wake_at ? ` until ${ahead(detail.wake_at)}` : ''}`)
      this.log(`  current step: ${detail.current_step ?? '-'} (attempts: ${detail.attempts})`)
      if (detail.lease_owner) this.log(`  lease:        ${detail.lease_owner} until ${moment(detail.lease_expires_at)}`)
      if (detail.error) this.log(`  last error:   ${detail.error}`)
      this.log('')
      this.log(
        detail.steps.length === 0
          ? 'No steps yet.'
          : renderTable(detail.steps, [
              { header: 'step', value: (s) => s.step },
              { header: 'status', value: (s) => s.status, state: true },
              { header: 'attempt', value: (s) => String(s.attempt) },
              { header: 'started', value: (s) => age(s.started_at, { precise: true }) },
              { header: 'took', value: (s) => took(s.started_at, s.finished_at) },
              { header: 'error', value: (s) => (s.error ?? '').slice(0, 80) },
            ]),
      )
    }
    return detail
  }

  private async overApi(given: string): Promise<WorkflowRunDetail> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'workflow-run', given)
    return api.get<WorkflowRunDetail>(`/admin/workflow-runs/${encodeURIComponent(id)}`).catch((err: unknown) => {
      throw err instanceof NotFoundError ? notFound(id) : err
    })
  }

  private async onDatabase(given: string): Promise<WorkflowRunDetail> {
    return withControlPlaneDatabase(this.env(), async (db) => {
      const runId = await resolveDbId(db, 'workflow_runs', 'workflow run', 'workflow list', given)
      const run = await getRun(db, runId)
      if (!run) throw notFound(given)
      const steps = await listSteps(db, run.id)
      const current = steps.find((s) => s.stepKey === run.currentStep) ?? null
      return { ...toRunView(run, current), input: run.input, result: run.result, steps: steps.map(toStepView) }
    })
  }
}

function notFound(id: string): NotFoundError {
  return new NotFoundError(`no workflow run ${id}`, 'list runs with `nodeplane workflow list`')
}
