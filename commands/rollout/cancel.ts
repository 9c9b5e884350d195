import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutCancel extends BaseCommand<typeof RolloutCancel> {
  static override summary = 'Cancel a running or paused rollout: no new batches, nodes in flight finish'
  static override description = 'Upgraded nodes keep the new version (`rollout rollback` reverts them). Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). A cancelled rollout is a repeat: exit 0, nothing changed; one that has ended otherwise exits 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout cancel "$ROLLOUT"',
    '<%= config.bin %> rollout cancel "$ROLLOUT" --yes --json',
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
    return runRolloutAction(api, 'cancel', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'No new batch will start; upgraded nodes keep the new version' })
  }
}
