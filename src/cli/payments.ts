/** What the payment commands share: rendering a payment and money amounts. */
import { formatMinorUnits } from '../payments/currency.js'
import { moment } from './human-time.js'
import type { PaymentView } from '../subscriptions/payment-requests.js'

/** 1500 USD -> "15.00 USD", 1500 JPY -> "1500 JPY" (prices are integer minor units of their currency). */
export function formatMoney(amountMinor: number, currency: string): string {
  return formatMinorUnits(amountMinor, currency)
}

export function describePayment(p: PaymentView): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(16)}${value}`
  const lines = [
    `payment ${p.id}`,
    line('status', p.failure_reason ? `${p.status} (${p.failure_reason})` : p.status),
    line('method', `${p.method} via ${p.provider}`),
    line('amount', formatMoney(p.amount_minor, p.currency)),
    ...p.items.map((i, n) => line(n === 0 ? 'items' : '', `${i.chain_profile_id} ${i.node_type} ${i.duration}: ${formatMoney(i.unit_price_minor, p.currency)}`)),
    line('subscriptions', p.subscription_ids.join(', ') || '-'),
  ]
  if (p.checkout_url) lines.push(line('checkout', p.checkout_url))
  if (p.crypto) {
    lines.push(line('pay', `${p.crypto.amount} ${p.crypto.currency} (${p.crypto.amount_base_units} base units)`))
    lines.push(line('to', p.crypto.receiver_address))
    lines.push(line('memo', p.crypto.memo))
    if (p.crypto.contract_address) lines.push(line('contract', `${p.crypto.contract_address}${p.crypto.chain_id ? ` (chain ${p.crypto.chain_id})` : ''}`))
  }
  lines.push(line('expires', moment(p.expires_at)), line('created', moment(p.created_at)), line('completed', moment(p.completed_at)))
  return lines.join('\n')
}

export const TERMINAL_PAYMENT_STATUSES = ['completed', 'failed', 'canceled']
