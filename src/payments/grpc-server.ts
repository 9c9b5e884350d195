/**
 * The payment service's gRPC server (port 50051): PaymentService over mutual TLS with TLS 1.3
 * minimum, every call refused unless the client certificate's common name is allowed, plus the
 * standard `grpc.health.v1.Health` (any client certificate the CA signed may ask it).
 */
import type { SecureServerOptions } from 'node:http2'
import * as grpc from '@grpc/grpc-js'
import { HealthImplementation } from 'grpc-health-check'
import type { Logger } from '../log.js'
import {
  PAYMENT_SERVICE_NAME,
  paymentServiceDefinition,
  paymentToWire,
  quoteToWire,
  statusForError,
  type WireInitiatePaymentRequest,
  type WireLineItem,
  type WirePayment,
  type WireQuote,
} from './grpc.js'
import type { PaymentService } from './service.js'
import type { AuditContext } from './store.js'

export interface PaymentGrpcServerOptions {
  service: PaymentService
  logger: Logger
  /** Common names of client certificates allowed to call PaymentService. */
  allowedClients: readonly string[]
  tls: { ca: Buffer; cert: Buffer; key: Buffer }
}

/**
 * grpc-js takes no TLS version option, but passes the credentials' constructor options to
 * http2.createSecureServer: minVersion there refuses TLS 1.2 handshakes.
 */
export function mutualTlsServerCredentials(tls: { ca: Buffer; cert: Buffer; key: Buffer }): grpc.ServerCredentials {
  const credentials = grpc.ServerCredentials.createSsl(tls.ca, [{ private_key: tls.key, cert_chain: tls.cert }], true)
  const base = credentials._getConstructorOptions.bind(credentials)
  credentials._getConstructorOptions = (): SecureServerOptions => ({ ...(base() ?? {}), minVersion: 'TLSv1.3', requestCert: true, rejectUnauthorized: true })
  return credentials
}

function peerCommonName(call: grpc.ServerUnaryCall<unknown, unknown>): string | undefined {
  const subject = call.getAuthContext()?.sslPeerCertificate?.subject as Record<string, string | string[]> | undefined
  const cn = subject?.CN
  return Array.isArray(cn) ? cn[0] : cn
}

function auditContext(context: { request_id: string; ip: string; actor: string } | null | undefined, client: string): AuditContext {
  return { actor: context?.actor ? `${client}:${context.actor}` : client, requestId: context?.request_id || null, ip: context?.ip || null }
}

const lineItems = (items: WireLineItem[]) => items.map((i) => ({ chain_profile_id: i.chain_profile_id, node_type: i.node_type, duration: i.duration }))

export class PaymentGrpcServer {
  private readonly server = new grpc.Server()
  private readonly health = new HealthImplementation({ '': 'SERVING', [PAYMENT_SERVICE_NAME]: 'SERVING' })
  private readonly allowed: ReadonlySet<string>
  private readonly log: Logger

  constructor(private readonly options: PaymentGrpcServerOptions) {
    this.allowed = new Set(options.allowedClients)
    this.log = options.logger.child({ component: 'payment-grpc' })
    const { service } = options
    this.server.addService(paymentServiceDefinition().service, {
      InitiatePayment: this.unary('InitiatePayment', async (req: WireInitiatePaymentRequest, client): Promise<{ payment: WirePayment; created: boolean }> => {
        const result = await service.initiatePayment(
          {
            customer: { id: req.customer?.id ?? '', email: req.customer?.email || null, wallet_address: req.customer?.wallet_address || null },
            items: lineItems(req.items),
            subscription_ids: req.subscription_ids,
            method: req.method,
            crypto_currency: req.crypto_currency || null,
            idempotency_key: req.idempotency_key,
            return_url: req.return_url,
            cancel_url: req.cancel_url,
            quote_id: req.quote_id || null,
          },
          auditContext(req.context, client),
        )
        return { payment: paymentToWire(result.payment), created: result.created }
      }),
      GetQuote: this.unary('GetQuote', async (req: { items: WireLineItem[]; crypto_currency: string; customer_id: string }): Promise<WireQuote> =>
        quoteToWire(await service.getQuote({ items: lineItems(req.items), crypto_currency: req.crypto_currency || null, customer_id: req.customer_id || null })),
      ),
      GetPayment: this.unary('GetPayment', async (req: { payment_id: string; customer_id: string }): Promise<WirePayment> =>
        paymentToWire(await service.getPayment(req.payment_id, req.customer_id || null)),
      ),
      CancelPayment: this.unary('CancelPayment', async (req: { payment_id: string; customer_id: string; reason: string; context: WireInitiatePaymentRequest['context'] }, client): Promise<WirePayment> =>
        paymentToWire(await service.cancelPayment(req.payment_id, req.customer_id || null, req.reason || 'canceled by the customer', auditContext(req.context, client))),
      ),
      GetPaymentMethods: this.unary('GetPaymentMethods', async (): Promise<{ methods: string[] }> => ({ methods: service.methods() })),
    })
    this.health.addToServer(this.server)
  }

  private unary<Req, Res>(method: string, fn: (request: Req, client: string) => Promise<Res>): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      const client = peerCommonName(call as grpc.ServerUnaryCall<unknown, unknown>)
      if (!client || !this.allowed.has(client)) {
        this.log.warn({ method, client_cn: client ?? null }, 'payment call refused: client certificate common name not allowed')
        callback({ code: grpc.status.PERMISSION_DENIED, details: `client certificate common name ${client ? `"${client.slice(0, 64)}" ` : ''}is not allowed` })
        return
      }
      fn(call.request, client).then(
        (response) => callback(null, response),
        (err: unknown) => {
          const status = statusForError(err)
          if (status.code === grpc.status.INTERNAL) this.log.error({ err, method }, 'payment call failed')
          else this.log.info({ method, code: grpc.status[status.code], reason: status.details }, 'payment call refused')
          callback({ code: status.code, details: status.details, ...(status.metadata ? { metadata: status.metadata } : {}) })
        },
      )
    }
  }

  /** Binds host:port (0 = a free port) and returns the port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, mutualTlsServerCredentials(this.options.tls), (err, bound) => (err ? reject(err) : resolve(bound)))
    })
  }

  /** Reports NOT_SERVING, then drains calls in flight (forced after `graceMs`). */
  close(graceMs = 5_000): Promise<void> {
    this.health.setStatus('', 'NOT_SERVING')
    this.health.setStatus(PAYMENT_SERVICE_NAME, 'NOT_SERVING')
    return new Promise((resolve) => {
      const force = setTimeout(() => {
        this.server.forceShutdown()
        resolve()
      }, graceMs)
      force.unref()
      this.server.tryShutdown(() => {
        clearTimeout(force)
        resolve()
      })
    })
  }
}
