/**
 * What both payments benches start from: a user with a pending subscription (control plane) and a
 * pending payment for it (payment service), linked to each other, as `POST /api/v1/payments`
 * leaves them.
 */
import crypto from 'node:crypto'
import { createUser } from '../src/auth/users.js'
import type { ChainCatalogue } from '../src/config/chains.js'
import type { Db } from '../src/db/knex.js'
import { insertPayment } from '../src/payments/store.js'
import { createSubscription } from '../src/subscriptions/subscriptions.js'

export interface PendingPaymentOptions {
  provider: 'test' | 'card'
  amountMinor: number
  /** The processor's session, stored as InitiatePayment leaves it once the processor made it. */
  providerReference?: string
}

export async function insertPendingPayment(controlPlane: Db, payments: Db, catalogue: ChainCatalogue, options: PendingPaymentOptions): Promise<{ subscriptionId: string; paymentId: string }> {
  const now = new Date()
  const user = await createUser(controlPlane, { email: `bench-${crypto.randomUUID()}@example.test` })
  const { subscription } = await createSubscription(controlPlane, { userId: user.id, chainProfileId: 'devnet', nodeType: 'full', duration: '1m' }, { catalogue })
  const paymentId = crypto.randomUUID()
  await payments.transaction(async (trx) => {
    await trx('customers').insert({ id: user.id, email: user.email, created_at: now, updated_at: now })
    await insertPayment(
      trx,
      {
        id: paymentId,
        customerId: user.id,
        method: 'card',
        provider: options.provider,
        amountMinor: options.amountMinor,
        currency: 'USD',
        idempotencyKey: paymentId,
        subscriptionIds: [subscription.id],
        returnUrl: 'https://example.test/r',
        cancelUrl: 'https://example.test/c',
        expiresAt: new Date(now.getTime() + 1_800_000),
        items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1m', unit_price_minor: options.amountMinor }],
      },
      { actor: 'bench' },
      now,
    )
    if (options.providerReference) {
      await trx('payments').where({ id: paymentId }).update({ provider_reference: options.providerReference, checkout_url: `https://checkout.example.test/c/pay/${options.providerReference}` })
    }
  })
  await controlPlane('subscriptions').where({ id: subscription.id }).update({ payment_id: paymentId })
  return { subscriptionId: subscription.id, paymentId }
}
