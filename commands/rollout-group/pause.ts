import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { SignalledGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupPause extends BaseCommand<typeof RolloutGroupPause> {
  static override summary = 'Pause a running rollout group (and its current component rollout)'
  static override description = 'A paused group is a repeat: exit 0, nothing changed (`changed: false`); other statuses exit 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group pause "$GROUP"',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledGroupView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'pause', id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('pause', group))
    return group
  }
}
