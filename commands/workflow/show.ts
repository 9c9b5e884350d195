import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { renderTable, shortTime } from '../../src/cli/display.js'
import { NotFoundError } from '../../src/errors.js'
import { getRun, listSteps, toRunView, toStepView, type WorkflowRunDetail } from '../../src/workflows/index.js'

export default class WorkflowShow extends BaseCommand<typeof WorkflowShow> {
  static override summary = 'Show one workflow run: status, current step, attempts, last error, and every step'
  static override examples = ['<%= config.bin %> workflow show --id 0190f1c2-…', '<%= config.bin %> workflow show --id ID --json | jq ".steps[] | select(.status == \\"failed\\")"']
  static override flags = {
    id: Flags.string({ description: 'run id (from `nodeplane workflow list`)', required: true }),
  }

  async run(): Promise<WorkflowRunDetail> {
    const detail = await withControlPlaneDatabase(this.env(), async (db) => {
      const run = await getRun(db, this.flags.id)
      if (!run) throw new NotFoundError(`no workflow run ${this.flags.id}`, 'list runs with `nodeplane workflow list`')
      const steps = await listSteps(db, run.id)
      const current = steps.find((s) => s.stepKey === run.currentStep) ?? null
      return { ...toRunView(run, current), input: run.input, result: run.result, steps: steps.map(toStepView) }
    })
    if (!this.jsonEnabled()) {
      this.log(`${detail.workflow} ${detail.key} (${detail.id})`)
      this.log(`  status:       ${detail.status}${detail.wake_at ? ` until ${shortTime(detail.wake_at)}` : ''}`)
      this.log(`  current step: ${detail.current_step ?? '-'} (attempts: ${detail.attempts})`)
      if (detail.lease_owner) this.log(`  lease:        ${detail.lease_owner} until ${shortTime(detail.lease_expires_at)}`)
      if (detail.error) this.log(`  last error:   ${detail.error}`)
      this.log('')
      this.log(
        detail.steps.length === 0
          ? 'No steps yet.'
          : renderTable(detail.steps, [
              { header: 'step', value: (s) => s.step },
              { header: 'status', value: (s) => s.status },
              { header: 'attempt', value: (s) => String(s.attempt) },
              { header: 'started', value: (s) => shortTime(s.started_at) },
              { header: 'finished', value: (s) => shortTime(s.finished_at) },
              { header: 'error', value: (s) => (s.error ?? '').slice(0, 80) },
            ]),
      )
    }
    return detail
  }
}
