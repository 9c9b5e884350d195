import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { SignalledGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupCancel extends BaseCommand<typeof RolloutGroupCancel> {
  static override summary = 'Cancel a running or paused rollout group: no further components'
  static override description = 'Components already upgraded stay upgraded. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). A cancelled group is a repeat: exit 0, nothing changed; one that has ended otherwise exits 4. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group cancel "$GROUP"',
    '<%= config.bin %> rollout-group cancel "$GROUP" --yes --json',
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
    const group = await runGroupAction(api, 'cancel', id, this.flags.yes)
    if (!this.jsonEnabled()) this.log(describeGroupAction('cancel', group))
    return group
  }
}
