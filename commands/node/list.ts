import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { listAll } from '../../src/cli/pages.js'
import { NODE_STATES } from '../../src/nodes/states.js'
import type { NodeView } from '../../src/nodes/views.js'

export default class NodeList extends BaseCommand<typeof NodeList> {
  static override summary = 'List your nodes (every node with an admin key), newest first, through the API'
  static override description = 'Follows the pages to list them all, or stops after --limit nodes. Needs the scope nodes:read.'
  static override examples = [
    '<%= config.bin %> node list',
    '<%= config.bin %> node list --state healthy --limit 20',
    '<%= config.bin %> node list --subscription 0193a1b2-… --json | jq -r ".nodes[].display_state"',
  ]
  static override aliases = ['node:ls']
  static override flags = {
    columns: columnsFlag,
    subscription: Flags.string({ description: 'only the node(s) of this subscription id' }),
    state: Flags.string({ description: 'only nodes in this infrastructure state', options: [...NODE_STATES] }),
    user: Flags.string({ description: 'admin only: the nodes of this user id' }),
    limit: Flags.integer({ description: 'list at most this many nodes (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ nodes: NodeView[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const filters = new URLSearchParams()
    if (this.flags.subscription !== undefined) filters.set('subscription_id', this.flags.subscription)
    if (this.flags.state !== undefined) filters.set('state', this.flags.state)
    if (this.flags.user !== undefined) filters.set('user_id', this.flags.user)
    const path = filters.size > 0 ? `/nodes?${filters.toString()}` : '/nodes'
    const nodes = await listAll<NodeView>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) this.log(nodes.length === 0 ? noNodes(filters.size > 0) : renderNodes(nodes))
    return { nodes }
  }
}

function noNodes(filtered: boolean): string {
  return filtered ? 'No nodes match these filters.' : 'No nodes yet: a node is created when a subscription is paid.'
}

function renderNodes(nodes: readonly NodeView[]): string {
  return renderTable(nodes, [
    { header: 'id', value: (n) => n.id, id: true },
    { header: 'chain', value: (n) => n.chain_profile_id },
    { header: 'type', value: (n) => n.node_type },
    { header: 'version', value: (n) => n.binary_version ?? '-' },
    { header: 'display state', value: (n) => n.display_state, state: true },
    { header: 'state', value: (n) => n.state, state: true },
    { header: 'sync', value: (n) => n.sync_status, state: true },
    { header: 'app health', value: (n) => n.application_health, state: true },
    { header: 'last heartbeat', value: (n) => age(n.last_heartbeat, { precise: true, fallback: 'never' }) },
  ])
}
