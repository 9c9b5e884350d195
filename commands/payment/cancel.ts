import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag, yesFlag } from '../../src/cli/api-flags.js'
import { confirmDestructive } from '../../src/cli/prompt.js'
import { describePayment, formatMoney } from '../../src/cli/payments.js'
import type { PaymentView } from '../../src/subscriptions/payment-requests.js'
import { alreadyNote, type Changed } from '../../src/cli/repeats.js'

export default class PaymentCancel extends BaseCommand<typeof PaymentCancel> {
  static override summary = 'Cancel a pending payment; its subscriptions can then be paid again'
  static override description = 'Only a pending payment can be canceled; one canceled already is a repeat (exit 0, nothing changed, `changed: false`); a completed or failed one exits 4. Asks for confirmation on a terminal unless --yes (without a terminal, --yes is required). Needs the scope payments:write.'
  static override examples = ['<%= config.bin %> payment cancel "$PAYMENT" --yes', '<%= config.bin %> payment cancel "$PAYMENT" --yes --json | jq -r .status']
  static override args = { id: subjectArg('payment') }
  static override flags = {
    id: subjectFlag('payment'),
    yes: yesFlag,
    'api-url': apiUrlFlag,
  }

  async run(): Promise<Changed<PaymentView>> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'payment', this.subject('payment'))
    await confirmDestructive(this.flags.yes, async () => {
      const p = await api.get<PaymentView>(`/payments/${encodeURIComponent(id)}`)
      // Only a pending payment is asked about: a canceled one is a repeat, the API refuses any other (exit 4).
      if (p.status !== 'pending') return undefined
      return { action: `cancel payment ${p.id} (${formatMoney(p.amount_minor, p.currency)} by ${p.method}, pending)`, consequence: 'Its subscriptions can then be paid again' }
    })
    const payment = await api.post<Changed<PaymentView>>(`/payments/${encodeURIComponent(id)}/cancel`, {})
    if (!this.jsonEnabled()) this.log(payment.changed ? `Canceled ${describePayment(payment)}` : alreadyNote(`Payment ${payment.id}`, 'canceled', payment.updated_at))
    return payment
  }
}
