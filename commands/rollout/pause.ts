import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, RolloutView } from '../../src/rollouts/views.js'

export default class RolloutPause extends BaseCommand<typeof RolloutPause> {
  static override summary = 'Pause a running rollout after its current batch'
  static override description = 'The nodes in flight finish; no new batch starts until resume. Exits 4 unless the rollout is running. With --watch, waits until it is paused (exit 6). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout pause --id "$ROLLOUT"',
    '<%= config.bin %> rollout pause --id "$ROLLOUT" --watch   # returns (exit 6) once paused',
  ]
  static override flags = {
    id: rolloutIdFlag,
    ...watchFlags,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutView | RolloutDetailView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    return runRolloutAction(api, 'pause', this.flags, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
