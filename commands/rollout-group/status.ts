import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describeGroup, groupNotFound } from '../../src/cli/rollout-group-views.js'
import type { RolloutGroupStatusView } from '../../src/rollouts/views.js'

export default class RolloutGroupStatus extends BaseCommand<typeof RolloutGroupStatus> {
  static override summary = 'Show a rollout group: its status and, per component, its rollout\'s status and counters'
  static override description = 'A component before its turn shows not_started; its rollout id is the one `nodeplane rollout status --id` follows. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout-group status "$GROUP"',
    '<%= config.bin %> rollout-group status "$GROUP" --json | jq -r ".components[] | select(.status == \\"running\\") | .rollout_id"',
  ]
  static override args = { id: subjectArg('rollout group') }
  static override flags = {
    id: subjectFlag('rollout group'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupStatusView> {
    const id = this.subject('rollout group')
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await api.get<RolloutGroupStatusView>(`/rollout-groups/${encodeURIComponent(id)}/status`).catch(groupNotFound(id))
    if (!this.jsonEnabled()) this.log(describeGroup(group))
    return group
  }
}
