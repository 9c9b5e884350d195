import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { shortTime } from '../../src/cli/display.js'
import { NotFoundError } from '../../src/errors.js'
import type { NodeView } from '../../src/nodes/views.js'

export default class NodeShow extends BaseCommand<typeof NodeShow> {
  static override summary = 'Show one node through the API: its states, display state, versions and last heartbeat'
  static override description = 'An unknown id, or a node that is not yours, exits 3. Needs the scope nodes:read.'
  static override examples = ['<%= config.bin %> node show --id 0193a1b2-…', '<%= config.bin %> node show --id "$NODE_ID" --json | jq -r .display_state']
  static override flags = {
    id: Flags.string({ description: 'node id (`nodeplane node list`)', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<NodeView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const node = await api.get<NodeView>(`/nodes/${encodeURIComponent(this.flags.id)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no node ${this.flags.id} among the nodes you can see`, 'list them with `nodeplane node list`')
      throw err
    })
    if (!this.jsonEnabled()) this.log(describeNode(node))
    return node
  }
}

function describeNode(node: NodeView): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(22)}${value}`
  return [
    `${node.chain_profile_id} ${node.node_type} node ${node.id}`,
    line('display state', node.display_state),
    line('state', node.state),
    line('sync status', node.sync_status),
    line('application health', node.application_health),
    line('subscription', node.subscription_id),
    line('binary version', node.binary_version ?? '-'),
    line('config version', node.config_version ?? '-'),
    line('last heartbeat', shortTime(node.last_heartbeat, 'never')),
    line('last migration', shortTime(node.last_migration_triggered_at, 'never')),
    line('created', shortTime(node.created_at)),
    line('updated', shortTime(node.updated_at)),
  ].join('\n')
}
