/**
 * The control plane's client of the payment service: gRPC over mutual TLS, one deadline per
 * call, gRPC statuses turned back into the domain errors the HTTP layer maps (grpc.ts).
 */
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { ConfigError } from '../errors.js'
import {
  errorForStatus,
  paymentServiceDefinition,
  type WireContext,
  type WireInitiatePaymentRequest,
  type WireLineItem,
  type WirePayment,
  type WireQuote,
} from './grpc.js'
import { clientCertificateFiles, CONTROL_PLANE_CLIENT_NAME, paymentsCaDir } from './tls.js'

export interface PaymentClientOptions {
  /** host:port */
  target: string
  ca: Buffer
  cert: Buffer
  key: Buffer
  /** The name the server certificate is checked against, when it differs from the dialled host. */
  serverName?: string
  timeoutMs: number
}

type Unary<Req, Res> = (request: Req, metadata: grpc.Metadata, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, response: Res) => void) => void

interface RawClient extends grpc.Client {
  InitiatePayment: Unary<WireInitiatePaymentRequest, { payment: WirePayment; created: boolean }>
  GetQuote: Unary<{ items: WireLineItem[]; crypto_currency: string; customer_id: string }, WireQuote>
  GetPayment: Unary<{ payment_id: string; customer_id: string }, WirePayment>
  CancelPayment: Unary<{ payment_id: string; customer_id: string; reason: string; context: WireContext | null }, WirePayment>
  GetPaymentMethods: Unary<Record<string, never>, { methods: string[] }>
}

export type InitiatePaymentCall = Omit<WireInitiatePaymentRequest, 'quote_id' | 'crypto_currency'> & { quote_id?: string; crypto_currency?: string | null }

export class PaymentClient {
  private readonly client: RawClient

  constructor(private readonly options: PaymentClientOptions) {
    const Service = paymentServiceDefinition()
    const host = options.target.replace(/:\d+$/, '').replace(/^\[|\]$/g, '')
    // Checking a certificate against an IP literal is deprecated in Node's TLS (SNI carries names
    // only); the development certificate also names localhost.
    const serverName = options.serverName ?? (net.isIP(host) ? 'localhost' : undefined)
    const channelOptions: grpc.ChannelOptions = serverName ? { 'grpc.ssl_target_name_override': serverName, 'grpc.default_authority': serverName } : {}
    this.client = new Service(options.target, grpc.credentials.createSsl(options.ca, options.key, options.cert), channelOptions) as unknown as RawClient
  }

  private call<Req, Res>(method: Unary<Req, Res>, request: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      method.call(this.client, request, new grpc.Metadata(), { deadline: Date.now() + this.options.timeoutMs }, (err, response) => (err ? reject(errorForStatus(err)) : resolve(response)))
    })
  }

  initiatePayment(request: InitiatePaymentCall): Promise<{ payment: WirePayment; created: boolean }> {
    return this.call(this.client.InitiatePayment, { quote_id: '', ...request, crypto_currency: request.crypto_currency ?? '' })
  }

  getQuote(items: WireLineItem[], cryptoCurrency: string | null, customerId: string): Promise<WireQuote> {
    return this.call(this.client.GetQuote, { items, crypto_currency: cryptoCurrency ?? '', customer_id: customerId })
  }

  getPayment(paymentId: string, customerId: string | null): Promise<WirePayment> {
    return this.call(this.client.GetPayment, { payment_id: paymentId, customer_id: customerId ?? '' })
  }

  cancelPayment(paymentId: string, customerId: string | null, reason: string, context: WireContext): Promise<WirePayment> {
    return this.call(this.client.CancelPayment, { payment_id: paymentId, customer_id: customerId ?? '', reason, context })
  }

  async methods(): Promise<string[]> {
    return (await this.call(this.client.GetPaymentMethods, {})).methods
  }

  close(): void {
    this.client.close()
  }
}

export interface PaymentClientSettings {
  NODEPLANE_DATA_DIR: string
  PAYMENT_GRPC_PORT: number
  PAYMENT_SERVICE_URL?: string | undefined
  PAYMENT_SERVICE_SERVER_NAME?: string | undefined
  PAYMENT_TLS_CA_FILE?: string | undefined
  PAYMENT_CLIENT_CERT_FILE?: string | undefined
  PAYMENT_CLIENT_KEY_FILE?: string | undefined
  PAYMENT_CALL_TIMEOUT: number
}

/**
 * The client from the settings. Files set explicitly must exist (ConfigError otherwise); with
 * none set, the development set of `nodeplane certs dev` is used when present, and undefined is
 * returned when it is not (payment endpoints then answer 503).
 */
export function paymentClientFromSettings(settings: PaymentClientSettings): PaymentClient | undefined {
  const devDir = paymentsCaDir(settings.NODEPLANE_DATA_DIR)
  const devClient = clientCertificateFiles(devDir, CONTROL_PLANE_CLIENT_NAME)
  const explicit = Boolean(settings.PAYMENT_TLS_CA_FILE || settings.PAYMENT_CLIENT_CERT_FILE || settings.PAYMENT_CLIENT_KEY_FILE)
  const files = {
    PAYMENT_TLS_CA_FILE: settings.PAYMENT_TLS_CA_FILE ?? path.join(devDir, 'ca.pem'),
    PAYMENT_CLIENT_CERT_FILE: settings.PAYMENT_CLIENT_CERT_FILE ?? devClient.certFile,
    PAYMENT_CLIENT_KEY_FILE: settings.PAYMENT_CLIENT_KEY_FILE ?? devClient.keyFile,
  }
  const missing = Object.entries(files).filter(([, file]) => !fs.existsSync(file))
  if (missing.length > 0) {
    if (!explicit) return undefined
    throw new ConfigError(missing.map(([name, file]) => `${name}=${JSON.stringify(file)}: file not found (make a development set with \`nodeplane certs dev\`)`))
  }
  return new PaymentClient({
    target: settings.PAYMENT_SERVICE_URL ?? `127.0.0.1:${settings.PAYMENT_GRPC_PORT}`,
    ca: fs.readFileSync(files.PAYMENT_TLS_CA_FILE),
    cert: fs.readFileSync(files.PAYMENT_CLIENT_CERT_FILE),
    key: fs.readFileSync(files.PAYMENT_CLIENT_KEY_FILE),
    ...(settings.PAYMENT_SERVICE_SERVER_NAME ? { serverName: settings.PAYMENT_SERVICE_SERVER_NAME } : {}),
    timeoutMs: settings.PAYMENT_CALL_TIMEOUT,
  })
}
