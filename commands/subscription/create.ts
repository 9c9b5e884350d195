import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { age } from '../../src/cli/human-time.js'
import { DURATIONS } from '../../src/config/durations.js'
import type { SubscriptionView } from '../../src/subscriptions/views.js'

/** The subscription as the API answers it, and whether this call created it (201) or found an equal pending one (200). */
export type SubscriptionCreateResult = SubscriptionView & { created: boolean }

export default class SubscriptionCreate extends BaseCommand<typeof SubscriptionCreate> {
  static override summary = 'Create a subscription (pending payment) through the API, or get back your equal one still pending'
  static override description = [
    'An equal subscription of yours still pending_payment (same chain, node type and duration) is returned instead of a second one (`created: false`).',
    'An unknown chain, node type or duration exits 2 naming the allowed values. Needs the scope subscriptions:write.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> subscription create --chain devnet --node-type full --duration 1m',
    '<%= config.bin %> subscription create --chain devnet --node-type archive --duration 3m --json | jq -r .id',
  ]
  static override flags = {
    chain: Flags.string({ description: 'chain profile id (GET /api/v1/chains)', required: true }),
    'node-type': Flags.string({ description: "one of the chain profile's node types", required: true }),
    duration: Flags.string({ description: 'subscription term', required: true, options: [...DURATIONS] }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SubscriptionCreateResult> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const answer = await api.postWithStatus<SubscriptionView>('/subscriptions', {
      chain_profile_id: this.flags.chain,
      node_type: this.flags['node-type'],
      duration: this.flags.duration,
    })
    const result = { ...answer.body, created: answer.status === 201 }
    if (!this.jsonEnabled()) {
      const what = `${result.chain_profile_id} ${result.node_type} subscription ${result.id} (${result.duration})`
      this.log(result.created ? `Created ${what}, pending payment.` : `You already have ${what} pending payment (created ${age(result.created_at)}); returned it.`)
    }
    return result
  }
}
