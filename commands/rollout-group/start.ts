import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroupAction, runGroupAction } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupStart extends BaseCommand<typeof RolloutGroupStart> {
  static override summary = 'Start a pending rollout group: its components upgrade one after another'
  static override description = 'The group creates and runs one rollout per component, in order, with a health gate between them. Exits 4 unless pending. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group start --id "$GROUP"',
  ]
  static override flags = {
    id: Flags.string({ description: 'rollout group id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await runGroupAction(api, 'start', this.flags.id, true)
    if (!this.jsonEnabled()) this.log(describeGroupAction('start', group))
    return group
  }
}
