import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { groupRequest } from '../../src/cli/rollout-create.js'
import { describeGroup } from '../../src/cli/rollout-group-views.js'
import { FAILURE_POLICIES, ROLLOUT_STRATEGIES } from '../../src/rollouts/states.js'
import type { RolloutGroupView } from '../../src/rollouts/views.js'

export default class RolloutGroupCreate extends BaseCommand<typeof RolloutGroupCreate> {
  static override summary = 'Create a pending rollout group: one rollout per component (binary), in order'
  static override description = [
    'Give the components in order with --component BINARY:VERSION[:UPGRADE_ID] (repeatable; the node type is --node-type), or a --file holding the JSON body of POST /api/v1/rollout-groups; flags given with --file replace its fields (--component replaces its component_order).',
    'A component without an upgrade id takes the chain profile\'s release of that version. --failure-policy is required: partial_ok, rollback_all or manual. Nothing runs until `nodeplane rollout-group start`. Exit 2 for invalid input, 4 when the chain already has an active group or rollout. Needs the scope admin.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> rollout-group create --chain devnet --node-type full --failure-policy manual --component devnet-node:1.1.0:devnet-1.1.0',
    '<%= config.bin %> rollout-group create --file group.json',
    '<%= config.bin %> rollout-group create --file group.json --health-wait 2m --json | jq -r .id',
  ]
  static override flags = {
    file: Flags.string({ description: 'JSON file with the request body (POST /api/v1/rollout-groups)' }),
    chain: Flags.string({ description: 'chain profile id' }),
    'node-type': Flags.string({ description: 'node type upgraded (and of every --component)' }),
    'failure-policy': Flags.string({ description: 'when a component fails: partial_ok, rollback_all or manual (required: no default)', options: [...FAILURE_POLICIES] }),
    component: Flags.string({ description: 'BINARY:VERSION or BINARY:VERSION:UPGRADE_ID, in upgrade order (repeatable)', multiple: true }),
    strategy: Flags.string({ description: 'every component rollout\'s strategy (default rolling)', options: [...ROLLOUT_STRATEGIES] }),
    'batch-size': Flags.integer({ description: 'nodes upgraded at a time (default 10)', min: 1 }),
    'canary-size': Flags.integer({ description: 'canary strategy: nodes in the canary batch (default 1)', min: 1 }),
    'failure-threshold': Flags.string({ description: 'auto-pause fraction 0.0-1.0 (default 0.2)' }),
    'health-wait': Flags.string({ description: 'health validation per node, 1s to 24h (default 5m)' }),
    reason: Flags.string({ description: 'why (kept with the group)' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<RolloutGroupView> {
    const body = groupRequest(this.flags)
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const group = await api.post<RolloutGroupView>('/rollout-groups', body)
    if (!this.jsonEnabled()) this.log(`Created ${describeGroup(group)}`)
    return group
  }
}
