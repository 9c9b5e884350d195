import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutStart extends BaseCommand<typeof RolloutStart> {
  static override summary = 'Start a pending rollout (scheduled when its --scheduled-at is ahead); --watch follows it'
  static override description = 'pending -> running: the rollout plans its batches (eligible nodes) and upgrades them batch by batch. With --watch, follows it and exits 0 completed, 1 failed/cancelled/rolled back, 6 waiting for an operator (paused, canary approval). A running or scheduled rollout is a repeat: exit 0, nothing changed; a paused one exits 4 (resume it). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout start "$ROLLOUT"',
    '<%= config.bin %> rollout start "$ROLLOUT" --watch   # in CI: exit 0 completed, 1 failed, 6 waiting for an operator',
    '<%= config.bin %> rollout start "$ROLLOUT" --watch --json | jq -r .status',
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
    return runRolloutAction(api, 'start', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
