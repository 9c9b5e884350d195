import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroup, groupNotFound } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupStatusView } from '../../src/rollouts/views.js'

export default class RolloutGroupStatus extends BaseCommand<typeof RolloutGroupStatus> {
  static override summary = 'Show a rollout group: its status and, per component, its rollout\'s status and counters'
  static override description = 'A component before its turn shows not_started; its rollout id is the one `nodeplane rollout status --id` follows. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group status --id "$GROUP"',
    '<%= config.bin %> rollout-group status --id "$GROUP" --json | jq -r ".components[] | select(.status == \\"running\\") | .rollout_id"',
  ]
  static override flags = {
    id: Flags.string({ description: 'rollout group id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupStatusView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await api.get<RolloutGroupStatusView>(`/rollout-groups/${encodeURIComponent(this.flags.id)}/status`).catch(groupNotFound(this.flags.id))
    if (!this.jsonEnabled()) this.log(describeGroup(group))
    return group
  }
}
