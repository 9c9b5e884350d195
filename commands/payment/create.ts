import crypto from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import { describePayment, TERMINAL_PAYMENT_STATUSES } from '../../src/cli/payments.js'
import { UnavailableError, ValidationError } from '../../src/errors.js'
import { CRYPTO_CURRENCIES, PAYMENT_METHODS } from '../../src/payments/states.js'
import type { PaymentView } from '../../src/subscriptions/payment-requests.js'
import type { SubscriptionView } from '../../src/subscriptions/views.js'

export type PaymentCreateResult = PaymentView & { created: boolean }

function parseItem(text: string): { chain_profile_id: string; node_type: string; duration: string } {
  const parts = text.split('/')
  if (parts.length !== 3 || parts.some((p) => p.length === 0)) throw new ValidationError(`--item "${text.slice(0, 60)}" must be chain/node-type/duration, e.g. devnet/full/1m`)
  const [chain_profile_id, node_type, duration] = parts as [string, string, string]
  return { chain_profile_id, node_type, duration }
}

export default class PaymentCreate extends BaseCommand<typeof PaymentCreate> {
  static override summary = 'Pay for pending subscriptions through the API (card checkout link or crypto transfer instructions)'
  static override description = [
    'The items are taken from the subscriptions (--subscription, repeatable) unless given with --item. The idempotency key defaults to a new UUID and is printed: run the command again with --idempotency-key to retry safely (the same payment comes back).',
    'With --wait, polls until the payment completes, fails or is canceled (exit 0 only when completed). Needs the scope payments:write.',
    'Exit codes: 2 invalid input, 3 a subscription that is not yours, 4 a subscription not pending or already linked to an open payment (cancel that one with `nodeplane payment cancel`), 69 payment service unavailable.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> payment create --subscription "$SUB" --method card',
    '<%= config.bin %> payment create --subscription "$SUB" --method crypto --crypto-currency USDC --json | jq .crypto',
    '<%= config.bin %> payment create --subscription "$SUB" --method card --wait   # with the test provider of `nodeplane up`',
  ]
  static override flags = {
    subscription: Flags.string({ description: 'pending_payment subscription to pay for (repeatable)', multiple: true }),
    item: Flags.string({ description: 'item as chain/node-type/duration (repeatable; default: the subscriptions\' own)', multiple: true }),
    method: Flags.string({ description: 'payment method', required: true, options: [...PAYMENT_METHODS] }),
    'crypto-currency': Flags.string({ description: 'currency for --method crypto', options: [...CRYPTO_CURRENCIES] }),
    'idempotency-key': Flags.string({ description: 'client key for safe retries (default: a new UUID)' }),
    'return-url': Flags.string({ description: 'where the checkout page sends the payer after paying', default: 'http://localhost/nodeplane/payment/return' }),
    'cancel-url': Flags.string({ description: 'where the checkout page sends the payer on cancel', default: 'http://localhost/nodeplane/payment/cancel' }),
    'quote-id': Flags.string({ description: 'pay the prices of this quote (`nodeplane quote`)' }),
    wait: Flags.boolean({ description: 'wait until the payment completes, fails or is canceled' }),
    'wait-timeout': Flags.integer({ description: 'seconds --wait waits at most', default: 120, min: 1 }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<PaymentCreateResult> {
    // Checked here, before any request, in the flags' own words.
    if (this.flags.method === 'crypto' && !this.flags['crypto-currency']) {
      throw new ValidationError('--method crypto needs --crypto-currency', `give --crypto-currency, one of ${CRYPTO_CURRENCIES.join(', ')}`)
    }
    if (this.flags.method !== 'crypto' && this.flags['crypto-currency']) {
      throw new ValidationError(`--crypto-currency is only for --method crypto, not ${this.flags.method}`)
    }
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const subscriptionIds = this.flags.subscription ?? []
    let items = (this.flags.item ?? []).map(parseItem)
    if (items.length === 0) {
      if (subscriptionIds.length === 0) throw new ValidationError('nothing to pay for', 'give --subscription (repeatable) or --item chain/node-type/duration')
      const subscriptions = await Promise.all(subscriptionIds.map((id) => api.get<SubscriptionView>(`/subscriptions/${encodeURIComponent(id)}`)))
      items = subscriptions.map((s) => ({ chain_profile_id: s.chain_profile_id, node_type: s.node_type, duration: s.duration }))
    }
    const idempotencyKey = this.flags['idempotency-key'] ?? crypto.randomUUID()
    const answer = await api.postWithStatus<PaymentView>('/payments', {
      items,
      ...(subscriptionIds.length > 0 ? { subscription_ids: subscriptionIds } : {}),
      method: this.flags.method,
      ...(this.flags['crypto-currency'] ? { crypto_currency: this.flags['crypto-currency'] } : {}),
      idempotency_key: idempotencyKey,
      return_url: this.flags['return-url'],
      cancel_url: this.flags['cancel-url'],
      ...(this.flags['quote-id'] ? { quote_id: this.flags['quote-id'] } : {}),
    })
    let payment = answer.body
    const created = answer.status === 201
    if (!this.jsonEnabled()) {
      this.log(`${created ? 'Created' : 'Found (same idempotency key)'} ${describePayment(payment)}`)
      this.log(`  idempotency key: ${idempotencyKey}`)
    }
    if (this.flags.wait) {
      const deadline = Date.now() + this.flags['wait-timeout'] * 1_000
      while (!TERMINAL_PAYMENT_STATUSES.includes(payment.status)) {
        if (Date.now() > deadline) throw new UnavailableError(`payment ${payment.id} is still ${payment.status} after ${this.flags['wait-timeout']} s`, `follow it with \`nodeplane payment show --id ${payment.id}\``)
        await sleep(500)
        payment = await api.get<PaymentView>(`/payments/${payment.id}`)
      }
      if (!this.jsonEnabled()) this.log(`Payment ${payment.id} ${payment.status}${payment.failure_reason ? `: ${payment.failure_reason}` : ''}.`)
      if (payment.status !== 'completed') process.exitCode = 1
    }
    return { ...payment, created }
  }
}
