import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { columnsFlag } from '../../src/cli/display.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { listAll } from '../../src/cli/pages.js'
import { noRollouts, renderRollouts } from '../../src/cli/rollout-views.js'
import { ROLLOUT_STATUSES } from '../../src/rollouts/states.js'
import type { RolloutView } from '../../src/rollouts/views.js'

export default class RolloutList extends BaseCommand<typeof RolloutList> {
  static override summary = 'List rollouts, newest first: chain, upgrade, strategy, status, progress'
  static override description = 'Follows the pages to list them all, or stops after --limit rollouts. Needs the scope admin.'
  static override examples = [
    '<%= config.bin %> rollout list',
    '<%= config.bin %> rollout list --status running --chain devnet',
    '<%= config.bin %> rollout list --status paused --json | jq -r ".rollouts[].id"',
  ]
  static override aliases = ['rollout:ls']
  static override flags = {
    columns: columnsFlag,
    status: Flags.string({ description: 'only rollouts in this status', options: [...ROLLOUT_STATUSES] }),
    chain: Flags.string({ description: 'only rollouts of this chain profile' }),
    group: Flags.string({ description: 'only the component rollouts of this rollout group id' }),
    limit: Flags.integer({ description: 'list at most this many rollouts (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ rollouts: RolloutView[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const filters = new URLSearchParams()
    if (this.flags.status !== undefined) filters.set('status', this.flags.status)
    if (this.flags.chain !== undefined) filters.set('chain_profile_id', this.flags.chain)
    if (this.flags.group !== undefined) filters.set('group_id', this.flags.group)
    const path = filters.size > 0 ? `/rollouts?${filters.toString()}` : '/rollouts'
    const rollouts = await listAll<RolloutView>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) this.log(rollouts.length === 0 ? noRollouts(filters.size > 0) : renderRollouts(rollouts))
    return { rollouts }
  }
}
