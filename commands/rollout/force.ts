import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, RolloutView } from '../../src/rollouts/views.js'

export default class RolloutForce extends BaseCommand<typeof RolloutForce> {
  static override summary = 'Force a rollout past its failure threshold: it goes on, and the threshold no longer pauses it'
  static override description = 'A rollout auto-paused at its failure threshold resumes; a running one stops checking the threshold. Asks for confirmation on a terminal unless --yes. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout force --id "$ROLLOUT"',
    '<%= config.bin %> rollout force --id "$ROLLOUT" --yes --watch',
  ]
  static override flags = {
    id: rolloutIdFlag,
    ...watchFlags,
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    return runRolloutAction(api, 'force', this.flags, { json: this.jsonEnabled(), log: (line) => this.log(line), confirm: 'The failure threshold will no longer pause it' })
  }
}
