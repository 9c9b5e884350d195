import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { SignalledGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupResume extends BaseCommand<typeof RolloutGroupResume> {
  static override summary = 'Resume a paused rollout group'
  static override description = 'A running group is a repeat: exit 0, nothing changed; other statuses exit 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group resume "$GROUP"',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledGroupView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'resume', id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('resume', group))
    return group
  }
}
