/**
 * proto/payment.proto loaded at run time, the wire shapes as TypeScript types, and the mapping
 * between domain errors and gRPC status codes (proto/payment.proto lists them).
 */
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { ConflictError, DomainError, NotFoundError, UnavailableError, ValidationError } from '../errors.js'
import { packageRoot } from '../package-root.js'
import { IdempotencyKeyReusedError, PaidAtProviderError, PaymentPreconditionError } from './errors.js'
import type { QuoteRecord } from './service.js'
import type { PaymentRecord } from './store.js'

export const PAYMENT_SERVICE_NAME = 'nodeplane.payments.v1.PaymentService'

export interface WireLineItem {
  chain_profile_id: string
  node_type: string
  duration: string
}

export interface WirePricedItem extends WireLineItem {
  unit_price_minor: number
}

export interface WireContext {
  request_id: string
  ip: string
  actor: string
}

export interface WireInitiatePaymentRequest {
  customer: { id: string; email: string; wallet_address: string } | null
  items: WireLineItem[]
  subscription_ids: string[]
  method: string
  crypto_currency: string
  idempotency_key: string
  return_url: string
  cancel_url: string
  quote_id: string
  context: WireContext | null
}

export interface WireCrypto {
  currency: string
  amount: string
  amount_base_units: string
  receiver_address: string
  memo: string
  contract_address: string
  chain_id: number
}

export interface WirePayment {
  id: string
  customer_id: string
  status: string
  method: string
  provider: string
  amount_minor: number
  currency: string
  items: WirePricedItem[]
  subscription_ids: string[]
  checkout_url: string
  crypto: WireCrypto | null
  failure_reason: string
  return_url: string
  cancel_url: string
  idempotency_key: string
  expires_at: string
  created_at: string
  updated_at: string
  completed_at: string
}

export interface WireQuote {
  id: string
  items: WirePricedItem[]
  amount_minor: number
  currency: string
  crypto_amounts: Record<string, string>
  expires_at: string
}

let cached: grpc.ServiceClientConstructor | undefined

export function paymentServiceDefinition(): grpc.ServiceClientConstructor {
  if (cached) return cached
  const definition = protoLoader.loadSync(path.join(packageRoot(), 'proto', 'payment.proto'), {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  })
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    nodeplane: { payments: { v1: { PaymentService: grpc.ServiceClientConstructor } } }
  }
  cached = loaded.nodeplane.payments.v1.PaymentService
  return cached
}

export function paymentToWire(p: PaymentRecord): WirePayment {
  return {
    id: p.id,
    customer_id: p.customerId,
    status: p.status,
    method: p.method,
    provider: p.provider,
    amount_minor: p.amountMinor,
    currency: p.currency,
    items: p.items,
    subscription_ids: p.subscriptionIds,
    checkout_url: p.checkoutUrl ?? '',
    crypto: p.crypto
      ? {
          currency: p.crypto.currency,
          amount: p.crypto.amount,
          amount_base_units: p.crypto.amountBaseUnits,
          receiver_address: p.crypto.receiverAddress,
          memo: p.crypto.memo,
          contract_address: p.crypto.contractAddress ?? '',
          chain_id: p.crypto.chainId ?? 0,
        }
      : null,
    failure_reason: p.failureReason ?? '',
    return_url: p.returnUrl,
    cancel_url: p.cancelUrl,
    idempotency_key: p.idempotencyKey,
    expires_at: p.expiresAt.toISOString(),
    created_at: p.createdAt.toISOString(),
    updated_at: p.updatedAt.toISOString(),
    completed_at: p.completedAt?.toISOString() ?? '',
  }
}

export function quoteToWire(q: QuoteRecord): WireQuote {
  return { id: q.id, items: q.items, amount_minor: q.amountMinor, currency: q.currency, crypto_amounts: { ...q.cryptoAmounts } as Record<string, string>, expires_at: q.expiresAt.toISOString() }
}

/**
 * Trailing metadata with the reason and the advice of an UNAVAILABLE the service itself answered
 * (a provider that could not set the payment up), so the client tells it from a transport failure.
 */
export const ERROR_METADATA = { message: 'nodeplane-error', details: 'nodeplane-error-details', kind: 'nodeplane-error-kind' } as const
const PAID_AT_PROVIDER = 'paid_at_provider'

/** Server side: a thrown error as the status the proto documents. */
export function statusForError(err: unknown): { code: grpc.status; details: string; metadata?: grpc.Metadata } {
  if (err instanceof IdempotencyKeyReusedError) return { code: grpc.status.ALREADY_EXISTS, details: err.message }
  if (err instanceof PaidAtProviderError) {
    const metadata = new grpc.Metadata()
    metadata.set(ERROR_METADATA.kind, PAID_AT_PROVIDER)
    return { code: grpc.status.FAILED_PRECONDITION, details: err.message, metadata }
  }
  if (err instanceof PaymentPreconditionError) return { code: grpc.status.FAILED_PRECONDITION, details: err.message }
  if (err instanceof ValidationError) return { code: grpc.status.INVALID_ARGUMENT, details: err.details === err.message ? err.message : `${err.message}: ${err.details}` }
  if (err instanceof NotFoundError) return { code: grpc.status.NOT_FOUND, details: err.message }
  if (err instanceof UnavailableError) {
    const metadata = new grpc.Metadata()
    metadata.set(ERROR_METADATA.message, err.message)
    metadata.set(ERROR_METADATA.details, err.details)
    return { code: grpc.status.UNAVAILABLE, details: `${err.message}; ${err.details}`, metadata }
  }
  if (err instanceof ConflictError) return { code: grpc.status.FAILED_PRECONDITION, details: err.message }
  return { code: grpc.status.INTERNAL, details: 'internal error' }
}

/** Client side: a gRPC status as the domain error the HTTP layer maps (400/404/409/503). */
export function errorForStatus(err: grpc.ServiceError): DomainError {
  const message = err.details || err.message
  switch (err.code) {
    case grpc.status.INVALID_ARGUMENT:
      return new ValidationError(message)
    case grpc.status.NOT_FOUND:
      return new NotFoundError(message)
    case grpc.status.ALREADY_EXISTS:
      return new IdempotencyKeyReusedError(message, 'a retry must repeat the request exactly; use a new idempotency_key for a new payment')
    case grpc.status.FAILED_PRECONDITION:
      return err.metadata?.get(ERROR_METADATA.kind)[0] === PAID_AT_PROVIDER ? new PaidAtProviderError(message) : new PaymentPreconditionError(message)
    case grpc.status.PERMISSION_DENIED:
    case grpc.status.UNAUTHENTICATED:
      return new UnavailableError('the payment service refused this control plane', 'its client certificate is not allowed (PAYMENT_ALLOWED_CLIENTS) — an operator must fix the configuration')
    default: {
      // The service's own refusal (the payment was marked failed: a retry needs a new key), or the transport's.
      const [reason] = err.code === grpc.status.UNAVAILABLE ? (err.metadata?.get(ERROR_METADATA.message) ?? []) : []
      const [advice] = err.code === grpc.status.UNAVAILABLE ? (err.metadata?.get(ERROR_METADATA.details) ?? []) : []
      if (typeof reason === 'string' && typeof advice === 'string') return new UnavailableError(reason, advice)
      return new UnavailableError('the payment service is unavailable', 'retry later')
    }
  }
}
