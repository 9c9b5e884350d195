import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { isIdPrefix, resolveApiId, resolveDbId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { withControlPlaneDatabase } from '../../src/cli/control-plane-db.js'
import { moment } from '../../src/cli/human-time.js'
import { isUuid } from '../../src/db/ids.js'
import { NotFoundError, ValidationError } from '../../src/errors.js'
import { findOperatorNodeView, type OperatorNodeView } from '../../src/nodes/operator-view.js'
import type { NodeView } from '../../src/nodes/views.js'
import type { NodeEndpoints } from '../../src/rpc-gateway/endpoints.js'

/** A node as GET /api/v1/nodes/{id} answers it: the view plus its rpc-gateway endpoints. */
type ApiNodeView = NodeView & { endpoints: NodeEndpoints }

export default class NodeShow extends BaseCommand<typeof NodeShow> {
  static override summary = 'Show one node through the API: its states, display state, versions, last heartbeat and JSON-RPC endpoint'
  static override description =
    'An unknown id, or a node that is not yours, exits 3. Needs the scope nodes:read. With --wide (operators), the node is read from the control-plane database (DATABASE_URL) instead, with its agent\'s latest report: the chain process\'s pid on the host, the agent version and process state.'
  static override examples = [
    '<%= config.bin %> node show 0193a1b2-…',
    '<%= config.bin %> node show "$NODE_ID" --json | jq -r .display_state',
    '<%= config.bin %> node show "$NODE_ID" --json | jq -r .endpoints.http   # POST JSON-RPC there with X-API-Key (scope nodes:rpc)',
    '<%= config.bin %> node show "$NODE_ID" --wide --json | jq -r .agent.chain_pid',
  ]
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node'),
    'api-url': apiUrlFlag,
    wide: Flags.boolean({ description: "operators: read the control-plane database and add the agent's report (chain pid)", default: false }),
  }

  async run(): Promise<ApiNodeView | OperatorNodeView> {
    if (this.flags.wide) return this.showWide()
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'node', this.subject('node'))
    const node = await api.get<ApiNodeView>(`/nodes/${encodeURIComponent(id)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no node ${id} among the nodes you can see`, 'list them with `nodeplane node list`')
      throw err
    })
    if (!this.jsonEnabled()) this.log(`${describeNode(node)}\n  ${'endpoint (http):'.padEnd(22)}${node.endpoints.http}\n  ${'endpoint (ws):'.padEnd(22)}${node.endpoints.ws}`)
    return node
  }

  private async showWide(): Promise<OperatorNodeView> {
    const given = this.subject('node')
    if (!isUuid(given) && !isIdPrefix(given)) throw new ValidationError(`"${given.slice(0, 60)}" is not a node id (UUID)`, 'list the nodes with `nodeplane node list`')
    const node = await withControlPlaneDatabase(this.env(), async (db) => {
      const id = await resolveDbId(db, 'nodes', 'node', 'node list', given)
      return findOperatorNodeView(db, id.toLowerCase())
    })
    if (!node) throw new NotFoundError(`no node ${given} in the control-plane database`, 'list them with `nodeplane node list`')
    if (!this.jsonEnabled()) this.log(`${describeNode(node)}\n${describeAgent(node)}`)
    return node
  }
}

function describeAgent(node: OperatorNodeView): string {
  const { agent } = node
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(22)}${value}`
  return [
    line('agent report', moment(agent.reported_at, { fallback: 'never' })),
    line('agent version', agent.agent_version ?? '-'),
    line('process state', agent.process_state ?? '-'),
    line('chain pid', agent.chain_pid === null ? '-' : String(agent.chain_pid)),
    line('restarts (window)', agent.restarts_in_window === null ? '-' : String(agent.restarts_in_window)),
  ].join('\n')
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
    line('last heartbeat', moment(node.last_heartbeat, { fallback: 'never' })),
    line('last migration', moment(node.last_migration_triggered_at, { fallback: 'never' })),
    line('created', moment(node.created_at)),
    line('updated', moment(node.updated_at)),
  ].join('\n')
}
