import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, RolloutView } from '../../src/rollouts/views.js'

export default class RolloutApproveCanary extends BaseCommand<typeof RolloutApproveCanary> {
  static override summary = 'Approve the canary of a breaking migration: the rest of the fleet follows'
  static override description = 'Only while the rollout waits for it (status running, awaiting approve_canary; `rollout status` shows it); otherwise exit 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout approve-canary --id "$ROLLOUT"',
    '<%= config.bin %> rollout approve-canary --id "$ROLLOUT" --watch   # then follow it to the end',
  ]
  static override flags = {
    id: rolloutIdFlag,
    ...watchFlags,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    return runRolloutAction(api, 'approve-canary', this.flags, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
