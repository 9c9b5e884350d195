import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../src/cli/api-flags.js'
import { renderTable } from '../src/cli/display.js'
import { ahead } from '../src/cli/human-time.js'
import { formatMoney } from '../src/cli/payments.js'
import { ValidationError } from '../src/errors.js'
import { CRYPTO_CURRENCIES } from '../src/payments/states.js'

interface QuoteView {
  id: string
  items: Array<{ chain_profile_id: string; node_type: string; duration: string; unit_price_minor: number }>
  amount_minor: number
  currency: string
  crypto_amounts: Record<string, string>
  expires_at: string
}

export default class Quote extends BaseCommand<typeof Quote> {
  static override summary = 'Price items: the total in fiat and in each supported crypto currency (valid 15 minutes)'
  static override description = 'Pass the quote id to `nodeplane payment create --quote-id` to pay these prices. An unknown item exits 2. Needs the scope payments:read.'
  static override examples = ['<%= config.bin %> quote --item devnet/full/1m', '<%= config.bin %> quote --item devnet/full/1w --item devnet/archive/1m --crypto-currency ETH --json']
  static override flags = {
    item: Flags.string({ description: 'item as chain/node-type/duration (repeatable)', required: true, multiple: true }),
    'crypto-currency': Flags.string({ description: 'price in this crypto currency only', options: [...CRYPTO_CURRENCIES] }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<QuoteView> {
    const items = this.flags.item.map((text) => {
      const parts = text.split('/')
      if (parts.length !== 3 || parts.some((p) => p.length === 0)) throw new ValidationError(`--item "${text.slice(0, 60)}" must be chain/node-type/duration, e.g. devnet/full/1m`)
      return { chain_profile_id: parts[0] as string, node_type: parts[1] as string, duration: parts[2] as string }
    })
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const quote = await api.post<QuoteView>('/quotes', { items, ...(this.flags['crypto-currency'] ? { crypto_currency: this.flags['crypto-currency'] } : {}) })
    if (!this.jsonEnabled()) {
      this.log(renderTable(quote.items, [
        { header: 'chain', value: (i) => i.chain_profile_id },
        { header: 'type', value: (i) => i.node_type },
        { header: 'duration', value: (i) => i.duration },
        { header: 'price', value: (i) => formatMoney(i.unit_price_minor, quote.currency) },
      ]))
      this.log(`total: ${formatMoney(quote.amount_minor, quote.currency)}${Object.entries(quote.crypto_amounts).map(([c, a]) => `, ${a} ${c}`).join('')}`)
      this.log(`quote ${quote.id}, valid until ${ahead(quote.expires_at)}`)
    }
    return quote
  }
}
