import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutForce extends BaseCommand<typeof RolloutForce> {
  static override summary = 'Force a rollout past its failure threshold: it goes on, and the threshold no longer pauses it'
  static override description = 'A rollout auto-paused at its failure threshold resumes; a running one stops checking the threshold (one already forced is a repeat: exit 0, nothing changed). Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout force "$ROLLOUT"',
    '<%= config.bin %> rollout force "$ROLLOUT" --yes --watch',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    ...watchFlags,
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledRolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    return runRolloutAction(api, 'force', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'The failure threshold will no longer pause it' })
  }
}
