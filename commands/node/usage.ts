import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { renderTable, shortTime } from '../../src/cli/display.js'
import { NotFoundError } from '../../src/errors.js'
import { USAGE_WINDOWS, type NodeUsage, type UsageFigures } from '../../src/rpc-gateway/usage.js'

const ms = (value: number | null): string => (value === null ? '-' : `${value}`)

export default class NodeUsageCommand extends BaseCommand<typeof NodeUsageCommand> {
  static override summary = "Show the calls to a node's JSON-RPC endpoint over the last 24h or 7d: a table by method, then totals"
  static override description =
    'Read through the API (GET /api/v1/nodes/{id}/usage; scope nodes:read). Counted by the rpc-gateway per hour, written every few seconds. Latency percentiles are the upper bounds of their buckets (docs/rpc-gateway.md, "Usage"). An unknown id, or a node that is not yours, exits 3.'
  static override examples = ['<%= config.bin %> node usage "$NODE_ID"', '<%= config.bin %> node usage "$NODE_ID" --window 7d --json | jq .totals']
  static override args = { id: subjectArg('node') }
  static override flags = {
    id: subjectFlag('node'),
    window: Flags.string({ description: 'rolling window ending now', options: [...USAGE_WINDOWS], default: '24h' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<NodeUsage> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'node', this.subject('node'))
    const usage = await api.get<NodeUsage>(`/nodes/${encodeURIComponent(id)}/usage?window=${encodeURIComponent(this.flags.window)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no node ${id} among the nodes you can see`, 'list them with `nodeplane node list`')
      throw err
    })
    if (!this.jsonEnabled()) this.log(renderUsage(usage))
    return usage
  }
}

function renderUsage(usage: NodeUsage): string {
  const head = `node ${usage.node_id}: ${usage.window} (${shortTime(usage.window_start)} to ${shortTime(usage.window_end)})`
  const columns = [
    { header: 'method', value: (row: UsageFigures & { method: string }) => row.method },
    { header: 'requests', value: (row: UsageFigures) => String(row.requests) },
    { header: 'errors', value: (row: UsageFigures) => String(row.errors) },
    { header: 'p50 ms', value: (row: UsageFigures) => ms(row.p50_ms) },
    { header: 'p99 ms', value: (row: UsageFigures) => ms(row.p99_ms) },
    { header: 'mean ms', value: (row: UsageFigures) => ms(row.mean_ms) },
  ]
  if (usage.methods.length === 0) return `${head}\nno calls in this window`
  return `${head}\n${renderTable([...usage.methods, { method: 'total', ...usage.totals }], columns)}`
}
