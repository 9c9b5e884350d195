import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { rolloutIdFlag } from '../../src/cli/rollout-actions.js'
import { rolloutNotFound } from '../../src/cli/rollout-views.js'
import type { RolloutNodeView } from '../../src/rollouts/views.js'

export default class RolloutRetryNode extends BaseCommand<typeof RolloutRetryNode> {
  static override summary = 'Retry one failed node of a running or paused rollout'
  static override description =
    'The node goes back to pending and the rollout upgrades it again with its next batch (attempt_count grows); a paused rollout does so once resumed. Exits 4 unless the node failed and the rollout is running or paused. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout retry-node "$ROLLOUT" --node "$NODE"',
    'for n in $(<%= config.bin %> rollout nodes --id "$ROLLOUT" --status failed --json | jq -r ".nodes[].node_id"); do <%= config.bin %> rollout retry-node "$ROLLOUT" --node "$n"; done',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    node: Flags.string({ description: 'node id (`nodeplane rollout nodes --status failed` lists them)', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutNodeView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    const { node } = this.flags
    const retried = await api.post<RolloutNodeView>(`/rollouts/${encodeURIComponent(id)}/nodes/${encodeURIComponent(node)}/retry`, {}).catch(rolloutNotFound(id))
    if (!this.jsonEnabled()) this.log(`Node ${retried.node_id} of rollout ${retried.rollout_id} is pending again (attempt ${retried.attempt_count + 1} next); resume the rollout if it is paused.`)
    return retried
  }
}
