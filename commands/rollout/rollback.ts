import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutRollback extends BaseCommand<typeof RolloutRollback> {
  static override summary = 'Roll back a rollout: every upgraded node returns to the source version'
  static override description = 'The rollout pauses, each succeeded node is upgraded back (target and source swapped, latest batches first), then it is rolled_back. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). A rollout being rolled back, or rolled back, is a repeat: exit 0, nothing changed. With --watch, exits 1 once rolled back (the rollout did not land). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout rollback "$ROLLOUT"',
    '<%= config.bin %> rollout rollback "$ROLLOUT" --yes --watch',
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
    return runRolloutAction(api, 'rollback', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'Every upgraded node goes back to the source version' })
  }
}
