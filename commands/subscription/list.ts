import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { listAll } from '../../src/cli/pages.js'
import { SUBSCRIPTION_STATUSES, type SubscriptionView } from '../../src/subscriptions/views.js'

export default class SubscriptionList extends BaseCommand<typeof SubscriptionList> {
  static override summary = 'List your subscriptions (every one with an admin key), newest first, through the API'
  static override description = 'Follows the pages to list them all, or stops after --limit subscriptions. Needs the scope subscriptions:read.'
  static override examples = [
    '<%= config.bin %> subscription list',
    '<%= config.bin %> subscription list --status pending_payment --limit 20',
    '<%= config.bin %> subscription list --status active --json | jq -r ".subscriptions[].id"',
  ]
  static override aliases = ['subscription:ls']
  static override flags = {
    columns: columnsFlag,
    status: Flags.string({ description: 'only subscriptions in this status', options: [...SUBSCRIPTION_STATUSES] }),
    limit: Flags.integer({ description: 'list at most this many subscriptions (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ subscriptions: SubscriptionView[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const path = this.flags.status === undefined ? '/subscriptions' : `/subscriptions?${new URLSearchParams({ status: this.flags.status }).toString()}`
    const subscriptions = await listAll<SubscriptionView>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) {
      this.log(subscriptions.length === 0 ? noSubscriptions(this.flags.status !== undefined) : renderSubscriptions(subscriptions))
    }
    return { subscriptions }
  }
}

function noSubscriptions(filtered: boolean): string {
  return filtered ? 'No subscriptions in this status.' : 'No subscriptions yet: create one with `nodeplane subscription create`.'
}

function renderSubscriptions(subscriptions: readonly SubscriptionView[]): string {
  return renderTable(subscriptions, [
    { header: 'id', value: (s) => s.id, id: true },
    { header: 'chain', value: (s) => s.chain_profile_id },
    { header: 'type', value: (s) => s.node_type },
    { header: 'duration', value: (s) => s.duration },
    { header: 'status', value: (s) => s.status, state: true },
    { header: 'expires', value: (s) => age(s.expires_at) },
    { header: 'created', value: (s) => age(s.created_at) },
  ])
}
