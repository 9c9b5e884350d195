/**
 * The provider adapter contract (payment service spec, "Provider adapter operations"): Name,
 * InitiatePayment, GetPaymentStatus and CancelPayment by provider reference, HandleWebhook with
 * the payload bytes and signature. Providers are chosen by method (registry.ts): each takes only
 * the methods it is configured for, and no method has two providers.
 */
import type { Db } from '../../db/knex.js'
import type { Logger } from '../../log.js'
import type { PaymentMethod } from '../states.js'
import type { AuditContext, PaymentRecord } from '../store.js'

/** What the payer needs, returned by InitiatePayment and stored on the payment. */
export interface ProviderSession {
  providerReference?: string | null
  /** Hosted checkout page (card). */
  checkoutUrl?: string | null
  /** Where and on which contract a crypto payment is sent. */
  crypto?: { receiverAddress: string; contractAddress: string | null; chainId: number | null }
}

/** A provider's own view of a payment, by reference (for reconciliation and operators). */
export type ProviderPaymentStatus = 'pending' | 'processing' | 'completed' | 'failed' | 'canceled' | 'unknown'

/** What reconciliation did: the payment's new status, or `unchanged` (the provider has nothing new). */
export type ReconcileOutcome = 'processing' | 'completed' | 'failed' | 'canceled' | 'unchanged'

export interface WebhookRequest {
  /** The raw body, exactly as received: signatures are over these bytes. */
  payload: Buffer
  /** The `Provider-Signature` header, or undefined when absent. */
  signature: string | undefined
  requestId: string
  ip: string | null
}

/** How the webhook endpoint answers: 200 handled or ignored, 400 / 401 refused before anything is written. */
export interface WebhookResult {
  status: 200 | 400 | 401
  /** Short outcome for the response body and the log (never echoes the signature). */
  outcome: string
  paymentId?: string
}

export interface ProviderContext {
  /** The payment service's database (payments, audit, outbox). */
  db: Db
  logger: Logger
  now: () => Date
}

export interface PaymentProvider {
  readonly name: string
  /** The methods this provider takes (the test provider's come from PAYMENT_TEST_PROVIDER_METHODS). */
  readonly methods: readonly PaymentMethod[]
  /**
   * Sets up the payment with the provider (a hosted checkout session, crypto instructions).
   * Called after the `pending` row is committed; throwing marks the payment failed.
   */
  initiatePayment(payment: PaymentRecord): Promise<ProviderSession>
  getPaymentStatus(providerReference: string): Promise<ProviderPaymentStatus>
  /**
   * Closes the session at the provider before a pending payment is canceled (by its customer or
   * its session expiry), so it can no longer be paid: `closed` (now, or it was already), or
   * `paid` when the payer has paid already (the provider's notification completes the payment).
   * Throws when the provider cannot be reached: the payment then stays pending.
   */
  cancelPayment(providerReference: string): Promise<'closed' | 'paid'>
  handleWebhook?(request: WebhookRequest): Promise<WebhookResult>
  /**
   * Reconciliation (a notification that never arrived): asks the provider about the payment and
   * moves it by the same rules as the provider's notification, in one transaction with the row
   * locked, so a notification arriving meanwhile moves it only once. Throws when the provider
   * cannot be reached. Providers that learn of payments by themselves (crypto watcher, test
   * timer) have none.
   */
  reconcile?(payment: PaymentRecord, context: AuditContext): Promise<ReconcileOutcome>
  /** Background work (the test provider's timer, the crypto watcher); stopped with `stop`. */
  start?(): Promise<void>
  stop?(): Promise<void>
  /** For /readyz on 8085. */
  health?(): Promise<{ ok: true } | { ok: false; error: string }>
}
