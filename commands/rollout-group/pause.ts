import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupPause extends BaseCommand<typeof RolloutGroupPause> {
  static override summary = 'Pause a running rollout group (and its current component rollout)'
  static override description = 'Exits 4 unless running. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group pause --id "$GROUP"',
  ]
  static override flags = {
    id: Flags.string({ description: 'rollout group id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'pause', this.flags.id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('pause', group))
    return group
  }
}
