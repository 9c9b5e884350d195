import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupCancel extends BaseCommand<typeof RolloutGroupCancel> {
  static override summary = 'Cancel a running or paused rollout group: no further components'
  static override description = 'Components already upgraded stay upgraded. Asks for confirmation on a terminal unless --yes. Exits 4 unless running or paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group cancel --id "$GROUP"',
    '<%= config.bin %> rollout-group cancel --id "$GROUP" --yes --json',
  ]
  static override flags = {
    id: Flags.string({ description: 'rollout group id', required: true }),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'cancel', this.flags.id, this.flags.yes)
    if (!this.jsonEnabled()) this.log(describeGroupAction('cancel', group))
    return group
  }
}
