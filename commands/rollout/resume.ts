import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, RolloutView } from '../../src/rollouts/views.js'

export default class RolloutResume extends BaseCommand<typeof RolloutResume> {
  static override summary = 'Resume a paused rollout'
  static override description = 'paused -> running; the next batch starts. A rollout auto-paused at its failure threshold needs `rollout force` instead to stop pausing. Exits 4 unless paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout resume "$ROLLOUT"',
    '<%= config.bin %> rollout resume "$ROLLOUT" --watch',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    ...watchFlags,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    return runRolloutAction(api, 'resume', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
