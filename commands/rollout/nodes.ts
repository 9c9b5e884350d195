import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { listAll } from '../../src/cli/pages.js'
import { rolloutIdFlag } from '../../src/cli/rollout-actions.js'
import { noRolloutNodes, renderRolloutNodes, rolloutNotFound } from '../../src/cli/rollout-views.js'
import { ROLLOUT_NODE_STATUSES } from '../../src/rollouts/states.js'
import type { RolloutDetailView, RolloutNodeView } from '../../src/rollouts/views.js'

export default class RolloutNodes extends BaseCommand<typeof RolloutNodes> {
  static override summary = "A rollout's nodes in batch order: status, upgrade phase, attempts, previous version, error"
  static override description = 'Empty until the rollout has started (it plans its batches then). --status filters here, after listing. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout nodes "$ROLLOUT"',
    '<%= config.bin %> rollout nodes "$ROLLOUT" --status failed',
    '<%= config.bin %> rollout nodes "$ROLLOUT" --json | jq -r \'.nodes[] | select(.status == "failed") | .node_id\'',
  ]
  static override args = { id: subjectArg('rollout') }
  static override flags = {
    id: subjectFlag('rollout'),
    status: Flags.string({ description: 'only nodes in this status', options: [...ROLLOUT_NODE_STATUSES] }),
    limit: Flags.integer({ description: 'show at most this many nodes', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ rollout_id: string; nodes: RolloutNodeView[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'rollout', this.subject('rollout'))
    const path = `/rollouts/${encodeURIComponent(id)}`
    const { status, limit } = this.flags
    let nodes = await listAll<RolloutNodeView>(api, `${path}/nodes`, status === undefined ? limit : undefined).catch(rolloutNotFound(id))
    if (status !== undefined) nodes = nodes.filter((n) => n.status === status).slice(0, limit)
    if (!this.jsonEnabled()) {
      if (nodes.length > 0) this.log(renderRolloutNodes(nodes))
      else this.log(noRolloutNodes(await api.get<RolloutDetailView>(path), status !== undefined))
    }
    return { rollout_id: id, nodes }
  }
}
