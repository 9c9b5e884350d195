import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { SignalledGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupStart extends BaseCommand<typeof RolloutGroupStart> {
  static override summary = 'Start a pending rollout group: its components upgrade one after another'
  static override description = 'The group creates and runs one rollout per component, in order, with a health gate between them. A running group is a repeat: exit 0, nothing changed; a paused or ended one exits 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group start "$GROUP"',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledGroupView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'start', id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('start', group))
    return group
  }
}
