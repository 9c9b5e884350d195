import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { SignalledGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupSkip extends BaseCommand<typeof RolloutGroupSkip> {
  static override summary = 'Skip the current component of a rollout group and go on with the next'
  static override description = 'Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Exits 4 unless the group runs or is paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group skip "$GROUP"',
    '<%= config.bin %> rollout-group skip "$GROUP" --yes',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SignalledGroupView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'skip', id, this.flags.yes)
    if (!this.jsonEnabled()) this.log(describeGroupAction('skip', group))
    return group
  }
}
