/** Requests to the payment service's gRPC API as the control plane sends them, for tests. */
import crypto from 'node:crypto'
import type { InitiatePaymentCall } from '../../src/payments/client.js'

/** A one-week devnet node paid by card for `customerId`, with fresh idempotency and request ids. */
export function cardPaymentRequest(customerId: string): InitiatePaymentCall {
  return {
    customer: { id: customerId, email: 'payer@example.test', wallet_address: '' },
    items: [{ chain_profile_id: 'devnet', node_type: 'full', duration: '1w' }],
    subscription_ids: [],
    method: 'card',
    idempotency_key: crypto.randomUUID(),
    return_url: 'https://example.test/return',
    cancel_url: 'https://example.test/cancel',
    context: { request_id: crypto.randomUUID(), ip: '127.0.0.1', actor: `user:${customerId}` },
  }
}
