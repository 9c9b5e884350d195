import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'

export default class PaymentMethods extends BaseCommand<typeof PaymentMethods> {
  static override summary = 'List the payment methods the enabled providers take (card, crypto)'
  static override description = 'Any authenticated caller may ask. Exit 69 when the payment service is not reachable.'
  static override examples = ['<%= config.bin %> payment methods', '<%= config.bin %> payment methods --json | jq -r ".methods[]"']
  static override flags = { 'api-url': apiUrlFlag }

  async run(): Promise<{ methods: string[] }> {
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const answer = await api.get<{ methods: string[] }>('/payment-methods')
    if (!this.jsonEnabled()) this.log(answer.methods.length === 0 ? 'No payment method is enabled.' : answer.methods.join('\n'))
    return answer
  }
}
