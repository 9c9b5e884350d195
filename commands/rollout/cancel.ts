import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, RolloutView } from '../../src/rollouts/views.js'

export default class RolloutCancel extends BaseCommand<typeof RolloutCancel> {
  static override summary = 'Cancel a running or paused rollout: no new batches, nodes in flight finish'
  static override description = 'Upgraded nodes keep the new version (`rollout rollback` reverts them). Asks for confirmation on a terminal unless --yes. Exits 4 unless running or paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout cancel --id "$ROLLOUT"',
    '<%= config.bin %> rollout cancel --id "$ROLLOUT" --yes --json',
  ]
  static override flags = {
    id: rolloutIdFlag,
    ...watchFlags,
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    return runRolloutAction(api, 'cancel', this.flags, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'No new batch will start; upgraded nodes keep the new version' })
  }
}
