import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { EXIT_BELOW_MINIMUM, fetchFleetReport, fetchNodeReport, nodesBelow, renderUptimeReport, type UptimeReport } from '../../src/cli/uptime-report.js'
import { showUptimeReport } from '../../src/cli/uptime-view.js'
import { NotFoundError, ValidationError } from '../../src/errors.js'
import { UPTIME_WINDOWS, type UptimeWindow } from '../../src/uptime/windows.js'

export default class UptimeReportCommand extends BaseCommand<typeof UptimeReportCommand> {
  static override summary = 'Uptime over 24h, 7d and 30d for one node or all your nodes (every node with an admin key), with a bar per day'
  static override description = `Up is healthy, degraded, and provisioning for its first 10 minutes; down is down, maintenance and a longer provisioning; syncing and terminating count neither way (docs/uptime.md). With --min, exits ${EXIT_BELOW_MINIMUM} when a node is below it over --window. Needs the scope nodes:read.`
  static override examples = [
    '<%= config.bin %> uptime report',
    '<%= config.bin %> uptime report --node 0193a1b2-…',
    '<%= config.bin %> uptime report --min 99.9 --window 30d --json | jq ".check.below"',
  ]
  static override flags = {
    node: Flags.string({ description: 'only this node id' }),
    user: Flags.string({ description: 'admin only: the nodes of this user id' }),
    limit: Flags.integer({ description: 'report at most this many nodes (newest first)', min: 1 }),
    min: Flags.string({ description: `exit ${EXIT_BELOW_MINIMUM} when a node's uptime percentage is below this (0-100) over --window` }),
    window: Flags.string({ description: 'the window --min applies to', options: [...UPTIME_WINDOWS], default: '30d' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<UptimeReport> {
    const min = parseMinimum(this.flags.min)
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const nodes = this.flags.node
      ? [
          await fetchNodeReport(api, this.flags.node).catch((err: unknown) => {
            if (err instanceof NotFoundError) throw new NotFoundError(`no node ${this.flags.node} among the nodes you can see`, 'list them with `nodeplane node list`')
            throw err
          }),
        ]
      : await fetchFleetReport(api, { userId: this.flags.user, limit: this.flags.limit })
    const report: UptimeReport = { generated_at: new Date().toISOString(), nodes }
    if (min !== undefined) {
      const window = this.flags.window as UptimeWindow
      report.check = { min, window, below: nodesBelow(nodes, min, window) }
      if (report.check.below.length > 0) process.exitCode = EXIT_BELOW_MINIMUM
    }
    if (!this.jsonEnabled()) {
      if (process.stdout.isTTY && nodes.length > 0) await showUptimeReport(report)
      else this.log(renderUptimeReport(report))
    }
    return report
  }
}

function parseMinimum(text: string | undefined): number | undefined {
  if (text === undefined) return undefined
  const value = Number(text)
  if (text.trim() === '' || !Number.isFinite(value) || value < 0 || value > 100) {
    throw new ValidationError(`--min must be a percentage between 0 and 100, got "${text}"`, 'for example --min 99.9')
  }
  return value
}
