import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { moment } from '../../src/cli/human-time.js'
import { NotFoundError } from '../../src/errors.js'
import type { SubscriptionView } from '../../src/subscriptions/views.js'

export default class SubscriptionShow extends BaseCommand<typeof SubscriptionShow> {
  static override summary = 'Show one subscription through the API: status, term, expiry and payment'
  static override description = 'An unknown id, or a subscription that is not yours, exits 3. Needs the scope subscriptions:read.'
  static override examples = ['<%= config.bin %> subscription show 0193a1b2-…', '<%= config.bin %> subscription show "$SUB" --json | jq -r .status']
  static override args = { id: subjectArg('subscription') }
  static override flags = {
    id: subjectFlag('subscription'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SubscriptionView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'subscription', this.subject('subscription'))
    const subscription = await api.get<SubscriptionView>(`/subscriptions/${encodeURIComponent(id)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) {
        throw new NotFoundError(`no subscription ${id} among the subscriptions you can see`, 'list them with `nodeplane subscription list`')
      }
      throw err
    })
    if (!this.jsonEnabled()) this.log(describeSubscription(subscription))
    return subscription
  }
}

function describeSubscription(s: SubscriptionView): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(16)}${value}`
  return [
    `${s.chain_profile_id} ${s.node_type} subscription ${s.id}`,
    line('status', s.status),
    line('duration', s.duration),
    line('expires', s.status === 'pending_payment' ? `${moment(s.expires_at)}, a placeholder until paid` : moment(s.expires_at)),
    line('grace until', moment(s.grace_period_expires_at)),
    line('payment', s.payment_id ?? '-'),
    line('owner', s.user_id),
    line('created', moment(s.created_at)),
    line('updated', moment(s.updated_at)),
  ].join('\n')
}
