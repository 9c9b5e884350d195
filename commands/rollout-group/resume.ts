import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupResume extends BaseCommand<typeof RolloutGroupResume> {
  static override summary = 'Resume a paused rollout group'
  static override description = 'Exits 4 unless paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group resume --id "$GROUP"',
  ]
  static override flags = {
    id: Flags.string({ description: 'rollout group id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'resume', this.flags.id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('resume', group))
    return group
  }
}
