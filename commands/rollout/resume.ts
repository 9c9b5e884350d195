import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutResume extends BaseCommand<typeof RolloutResume> {
  static override summary = 'Resume a paused rollout'
  static override description = 'paused -> running; the next batch starts. A rollout auto-paused at its failure threshold needs `rollout force` instead to stop pausing. A running rollout is a repeat: exit 0, nothing changed; one whose canary gate waits for approval exits 4 (approve-canary it), as do other statuses. Needs the scope admin.'
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

  async run(): Promise<SignalledRolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    return runRolloutAction(api, 'resume', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
