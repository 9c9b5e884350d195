import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describePayment } from '../../src/cli/payments.js'
import type { PaymentView } from '../../src/subscriptions/payment-requests.js'

export default class PaymentCancel extends BaseCommand<typeof PaymentCancel> {
  static override summary = 'Cancel a pending payment; its subscriptions can then be paid again'
  static override description = 'Only a pending payment can be canceled: any other exits 4. Needs the scope payments:write.'
  static override examples = ['<%= config.bin %> payment cancel --id "$PAYMENT"', '<%= config.bin %> payment cancel --id "$PAYMENT" --json | jq -r .status']
  static override flags = {
    id: Flags.string({ description: 'payment id', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<PaymentView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const payment = await api.post<PaymentView>(`/payments/${encodeURIComponent(this.flags.id)}/cancel`, {})
    if (!this.jsonEnabled()) this.log(`Canceled ${describePayment(payment)}`)
    return payment
  }
}
