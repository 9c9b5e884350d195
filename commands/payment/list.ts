import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { columnsFlag, renderTable } from '../../src/cli/display.js'
import { age } from '../../src/cli/human-time.js'
import { listAll } from '../../src/cli/pages.js'
import { formatMoney } from '../../src/cli/payments.js'
import { PAYMENT_STATUSES } from '../../src/payments/states.js'
import type { PaymentRequestSummary } from '../../src/subscriptions/payment-requests.js'

export default class PaymentList extends BaseCommand<typeof PaymentList> {
  static override summary = 'List your payments (every one with an admin key), newest first, through the API'
  static override description = 'Statuses follow the payment events; `nodeplane payment show` reads one live. Needs the scope payments:read.'
  static override examples = ['<%= config.bin %> payment list', '<%= config.bin %> payment list --status failed --json | jq -r ".payments[].id"']
  static override aliases = ['payment:ls']
  static override flags = {
    columns: columnsFlag,
    status: Flags.string({ description: 'only payments in this status', options: [...PAYMENT_STATUSES] }),
    limit: Flags.integer({ description: 'list at most this many payments (newest first)', min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<{ payments: PaymentRequestSummary[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const path = this.flags.status === undefined ? '/payments' : `/payments?${new URLSearchParams({ status: this.flags.status }).toString()}`
    const payments = await listAll<PaymentRequestSummary>(api, path, this.flags.limit)
    if (!this.jsonEnabled()) {
      this.log(
        payments.length === 0
          ? 'No payments yet: pay for a subscription with `nodeplane payment create`.'
          : renderTable(payments, [
              { header: 'id', value: (p) => p.id, id: true },
              { header: 'status', value: (p) => p.status, state: true },
              { header: 'method', value: (p) => (p.crypto_currency ? `${p.method} ${p.crypto_currency}` : p.method) },
              { header: 'amount', value: (p) => formatMoney(p.amount_minor, p.currency) },
              { header: 'subscriptions', value: (p) => String(p.subscription_ids.length) },
              { header: 'created', value: (p) => age(p.created_at) },
            ]),
      )
    }
    return { payments }
  }
}
