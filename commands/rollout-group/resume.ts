import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupResume extends BaseCommand<typeof RolloutGroupResume> {
  static override summary = 'Resume a paused rollout group'
  static override description = 'Exits 4 unless paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group resume "$GROUP"',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'resume', id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('resume', group))
    return group
  }
}
