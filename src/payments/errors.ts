/** Payment-specific refusals; each maps to one gRPC status (grpc-server.ts) and HTTP status. */
import { ConflictError } from '../errors.js'

/** The idempotency key was used before for a different request (gRPC ALREADY_EXISTS, HTTP 409). */
export class IdempotencyKeyReusedError extends ConflictError {
  readonly grpcCode = 'ALREADY_EXISTS'
}

/** The request cannot be served in the current state: cancel of a non-pending payment, expired quote, no provider for the method (gRPC FAILED_PRECONDITION, HTTP 409). */
export class PaymentPreconditionError extends ConflictError {
  readonly grpcCode = 'FAILED_PRECONDITION'
}

/** A cancel refused because the payer has paid already (the payment completes once the provider confirms it). */
export class PaidAtProviderError extends PaymentPreconditionError {}
