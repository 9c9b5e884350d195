import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag, runRolloutAction, watchFlags } from '../../src/cli/rollout-actions.js'
import type { RolloutDetailView, SignalledRolloutView } from '../../src/rollouts/views.js'

export default class RolloutPause extends BaseCommand<typeof RolloutPause> {
  static override summary = 'Pause a running rollout after its current batch'
  static override description = 'The nodes in flight finish; no new batch starts until resume. A paused rollout is a repeat: exit 0, nothing changed (`changed: false`); any other status exits 4. With --watch, waits until it is paused (exit 6). Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout pause "$ROLLOUT"',
    '<%= config.bin %> rollout pause "$ROLLOUT" --watch   # returns (exit 6) once paused',
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
    return runRolloutAction(api, 'pause', { ...this.flags, id }, { json: this.jsonEnabled(), log: (line) => this.log(line) })
  }
}
