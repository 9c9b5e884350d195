import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describePayment } from '../../src/cli/payments.js'
import { NotFoundError } from '../../src/errors.js'
import type { PaymentView } from '../../src/subscriptions/payment-requests.js'

export default class PaymentShow extends BaseCommand<typeof PaymentShow> {
  static override summary = 'Show one payment, live from the payment service: status, amount, items, what the payer needs'
  static override description = 'An unknown id, or a payment that is not yours, exits 3. Needs the scope payments:read.'
  static override examples = ['<%= config.bin %> payment show 0193a1b2-…', '<%= config.bin %> payment show "$PAYMENT" --json | jq -r .status']
  static override args = { id: subjectArg('payment') }
  static override flags = {
    id: subjectFlag('payment'),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<PaymentView> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'payment', this.subject('payment'))
    const payment = await api.get<PaymentView>(`/payments/${encodeURIComponent(id)}`).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no payment ${id} among the payments you can see`, 'list them with `nodeplane payment list`')
      throw err
    })
    if (!this.jsonEnabled()) this.log(describePayment(payment))
    return payment
  }
}
