import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describePayment } from '../../src/cli/payments.js'
import { NotFoundError } from '../../src/errors.js'
import type { PaymentView } from '../../src/subscriptions/payment-requests.js'

export default class PaymentShow extends BaseCommand<typeof PaymentShow> {
  static override summary = 'Show one payment, live from the payment service: status, amount, items, what the payer needs'
  static override description = 'An unknown id, or a payment that is not yours, exits 3. Needs the scope payments:read.'
  static override examples = ['<%= config.bin %> payment show --id 0193a1b2-…', '<%= config.bin %> payment show --id "$PAYMENT" --json | jq -r .status']
  static override flags = {
    id: Flags.string({ description: 'payment id (`nodeplane payment list`)', required: true }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<PaymentView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const payment = await api.get<PaymentView>(`/payments/${encodeURIComponent(this.flags.id)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no payment ${this.flags.id} among the payments you can see`, 'list them with `nodeplane payment list`')
      throw err
    })
    if (!this.jsonEnabled()) this.log(describePayment(payment))
    return payment
  }
}
