/**
 * Payment states (payment service spec, "States and transitions"), as a table in code. Every
 * status write goes through `transitionPayment` (store.ts), which checks this table.
 */
export const PAYMENT_STATUSES = ['pending', 'processing', 'completed', 'failed', 'canceled'] as const
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number]

export const PAYMENT_METHODS = ['card', 'crypto'] as const
export type PaymentMethod = (typeof PAYMENT_METHODS)[number]

export const CRYPTO_CURRENCIES = ['USDC', 'USDT', 'ETH'] as const
export type CryptoCurrency = (typeof CRYPTO_CURRENCIES)[number]

export const PAYMENT_TRANSITIONS: Readonly<Record<PaymentStatus, readonly PaymentStatus[]>> = {
  pending: ['processing', 'failed', 'canceled'],
  processing: ['completed', 'failed'],
  completed: [],
  failed: [],
  canceled: [],
}

export function isPaymentStatus(value: unknown): value is PaymentStatus {
  return typeof value === 'string' && (PAYMENT_STATUSES as readonly string[]).includes(value)
}

export function isPaymentMethod(value: unknown): value is PaymentMethod {
  return typeof value === 'string' && (PAYMENT_METHODS as readonly string[]).includes(value)
}

export function isCryptoCurrency(value: unknown): value is CryptoCurrency {
  return typeof value === 'string' && (CRYPTO_CURRENCIES as readonly string[]).includes(value)
}

export function isTerminalPaymentStatus(status: PaymentStatus): boolean {
  return PAYMENT_TRANSITIONS[status].length === 0
}

export function canTransitionPayment(from: PaymentStatus, to: PaymentStatus): boolean {
  return PAYMENT_TRANSITIONS[from].includes(to)
}

/** The event a move into `to` publishes on stream PAYMENTS, if any. */
export function subjectForStatus(to: PaymentStatus): 'payment.completed' | 'payment.failed' | 'payment.canceled' | undefined {
  if (to === 'completed') return 'payment.completed'
  if (to === 'failed') return 'payment.failed'
  if (to === 'canceled') return 'payment.canceled'
  return undefined
}
