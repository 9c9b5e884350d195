/**
 * A local stand-in for the card processor's HTTP API, exactly as much of it as the official SDK
 * calls for the card provider: create, retrieve and expire a checkout session. Requests are
 * checked the way the processor checks them (Bearer secret key, form-encoded bracket
 * parameters, Idempotency-Key replays, the 30 minute to 24 hour `expires_at` window), and errors
 * use its `{ error: { type, message, code?, param? } }` format, so the SDK raises its own
 * typed errors. Plus `signedDelivery`: a webhook delivery signed with the SDK's own test helper.
 */
import crypto from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Stripe from 'stripe'

export interface FakeSession {
  id: string
  object: 'checkout.session'
  amount_subtotal: number
  amount_total: number
  cancel_url: string | null
  client_reference_id: string | null
  created: number
  currency: string
  expires_at: number
  livemode: false
  metadata: Record<string, string>
  mode: string
  payment_intent: string | null
  payment_status: 'paid' | 'unpaid' | 'no_payment_required'
  status: 'open' | 'complete' | 'expired'
  success_url: string | null
  url: string | null
}

export interface RecordedRequest {
  method: string
  path: string
  idempotencyKey: string | undefined
  authorized: boolean
  form: Record<string, unknown>
}

export interface FakeCardProcessorOptions {
  secretKey: string
  /** The processor's clock, for `created` and the expires_at window; share the test's clock. */
  now?: () => Date
}

interface StoredReply {
  body: string
  status: number
  payload: unknown
}

type ErrorBody = { type: string; message: string; code?: string; param?: string }

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message)
  }
}

const MIN_EXPIRY_S = 30 * 60
const MAX_EXPIRY_S = 24 * 3600

export class FakeCardProcessor {
  readonly sessions = new Map<string, FakeSession>()
  readonly requests: RecordedRequest[] = []
  /** Sessions whose requests answer 500 (a processor failing for some sessions only), until removed. */
  readonly failingSessions = new Set<string>()
  private readonly idempotent = new Map<string, StoredReply>()
  private failures = 0
  private held: { arrived: () => void; released: Promise<void> } | undefined
  private readonly now: () => Date

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly secretKey: string,
    now: (() => Date) | undefined,
  ) {
    this.now = now ?? (() => new Date())
  }

  static async start(options: FakeCardProcessorOptions): Promise<FakeCardProcessor> {
    let fake: FakeCardProcessor | undefined
    const server = http.createServer((req, res) => {
      ;(fake as FakeCardProcessor).serve(req, res).catch((err: unknown) => {
        res.writeHead(500, { 'Content-Type': 'application/json' })
        res.end(JSON.stringify({ error: { type: 'api_error', message: `fake processor failed: ${String(err)}` } }))
      })
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => resolve())
    })
    const { port } = server.address() as AddressInfo
    fake = new FakeCardProcessor(server, `http://127.0.0.1:${port}`, options.secretKey, options.now)
    return fake
  }

  /** The next `count` requests answer 500 (the SDK retries a 500 up to maxNetworkRetries times). */
  failNext(count = 1): void {
    this.failures = count
  }

  /** The next request is held once it arrives (`arrived`) until `release()`: a call still in flight. */
  holdNext(): { arrived: Promise<void>; release: () => void } {
    let arrived!: () => void
    let release!: () => void
    const arrival = new Promise<void>((resolve) => (arrived = resolve))
    this.held = { arrived, released: new Promise<void>((resolve) => (release = resolve)) }
    return { arrived: arrival, release }
  }

  /** The payer finished the hosted page: the session is complete, paid or (async method) still unpaid. */
  complete(sessionId: string, paymentStatus: FakeSession['payment_status'] = 'paid'): FakeSession {
    return this.update(sessionId, { status: 'complete', payment_status: paymentStatus, payment_intent: `pi_${randomId()}` })
  }

  update(sessionId: string, patch: Partial<FakeSession>): FakeSession {
    const session = this.sessions.get(sessionId)
    if (!session) throw new Error(`no session ${sessionId}`)
    Object.assign(session, patch)
    return session
  }

  session(sessionId: string): FakeSession {
    const session = this.sessions.get(sessionId)
    if (!session) throw new Error(`no session ${sessionId}`)
    return session
  }

  async close(): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const raw = await readBody(req)
    const url = new URL(req.url ?? '/', 'http://fake')
    const method = req.method ?? 'GET'
    const idempotencyKey = header(req, 'idempotency-key')
    const authorized = header(req, 'authorization') === `Bearer ${this.secretKey}`
    const form = parseForm(method === 'GET' ? url.search.slice(1) : raw)
    this.requests.push({ method, path: url.pathname, idempotencyKey, authorized, form })
    const held = this.held
    if (held) {
      this.held = undefined
      held.arrived()
      await held.released
    }

    const send = (status: number, payload: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'Content-Type': 'application/json', 'Request-Id': `req_${randomId()}`, ...headers })
      res.end(JSON.stringify(payload))
    }
    if (!authorized) {
      const type = 'invalid_request_error'
      return send(401, { error: { type, message: 'Invalid API Key provided: sk_test_****' } })
    }
    const named = /^\/v1\/checkout\/sessions\/([^/]+)/.exec(url.pathname)?.[1]
    if (this.failures > 0 || (named !== undefined && this.failingSessions.has(decodeURIComponent(named)))) {
      if (this.failures > 0) this.failures--
      return send(500, { error: { type: 'api_error', message: 'An unknown error occurred' } })
    }
    if (method === 'POST' && idempotencyKey) {
      const stored = this.idempotent.get(idempotencyKey)
      if (stored && stored.body !== raw) {
        return send(400, {
          error: { type: 'idempotency_error', message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${idempotencyKey}' if you meant to execute a different request.` },
        })
      }
      if (stored) return send(stored.status, stored.payload, { 'Idempotent-Replayed': 'true', 'Idempotency-Key': idempotencyKey })
    }
    let status = 200
    let payload: unknown
    try {
      payload = this.route(method, url.pathname, form)
    } catch (err) {
      if (!(err instanceof ApiError)) throw err
      status = err.status
      payload = { error: err.body }
    }
    if (method === 'POST' && idempotencyKey) this.idempotent.set(idempotencyKey, { body: raw, status, payload })
    send(status, payload, idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {})
  }

  private route(method: string, path: string, form: Record<string, unknown>): unknown {
    if (method === 'POST' && path === '/v1/checkout/sessions') return this.create(form)
    const one = /^\/v1\/checkout\/sessions\/([^/]+)(\/expire)?$/.exec(path)
    if (one) {
      const id = decodeURIComponent(one[1] as string)
      if (method === 'GET' && !one[2]) return this.find(id)
      if (method === 'POST' && one[2]) return this.expire(id)
    }
    throw new ApiError(404, { type: 'invalid_request_error', message: `Unrecognized request URL (${method}: ${path}).` })
  }

  private create(form: Record<string, unknown>): FakeSession {
    const invalid = (param: string, message: string) => new ApiError(400, { type: 'invalid_request_error', code: 'parameter_invalid', param, message })
    if (form.mode !== 'payment') throw invalid('mode', 'mode must be payment')
    const items = form.line_items
    if (!Array.isArray(items) || items.length === 0) throw new ApiError(400, { type: 'invalid_request_error', code: 'parameter_missing', param: 'line_items', message: 'Missing required param: line_items.' })
    const lineItems = items.map((raw, i) => {
      const item = raw as { price_data?: { currency?: string; unit_amount?: string; product_data?: { name?: string } }; quantity?: string }
      const unitAmount = Number(item.price_data?.unit_amount)
      if (!item.price_data?.currency || !Number.isInteger(unitAmount) || unitAmount < 0 || !item.price_data.product_data?.name) {
        throw invalid(`line_items[${i}][price_data]`, 'price_data needs currency, unit_amount and product_data[name]')
      }
      return {
        price_data: { currency: item.price_data.currency, unit_amount: unitAmount, product_data: { name: item.price_data.product_data.name } },
        quantity: Number(item.quantity ?? 1),
      }
    })
    const currency = (lineItems[0] as (typeof lineItems)[number]).price_data.currency
    if (lineItems.some((i) => i.price_data.currency !== currency)) throw invalid('line_items', 'All line items must use the same currency.')
    const created = Math.floor(this.now().getTime() / 1000)
    const expiresAt = form.expires_at === undefined ? created + MAX_EXPIRY_S : Number(form.expires_at)
    if (!Number.isInteger(expiresAt) || expiresAt < created + MIN_EXPIRY_S || expiresAt > created + MAX_EXPIRY_S) {
      throw invalid('expires_at', 'The `expires_at` timestamp must be between 30 minutes and 24 hours from Checkout Session creation.')
    }
    const amount = lineItems.reduce((sum, i) => sum + i.price_data.unit_amount * i.quantity, 0)
    const id = `cs_test_${randomId(40)}`
    const session: FakeSession = {
      id,
      object: 'checkout.session',
      amount_subtotal: amount,
      amount_total: amount,
      cancel_url: typeof form.cancel_url === 'string' ? form.cancel_url : null,
      client_reference_id: typeof form.client_reference_id === 'string' ? form.client_reference_id : null,
      created,
      currency,
      expires_at: expiresAt,
      livemode: false,
      metadata: (form.metadata as Record<string, string> | undefined) ?? {},
      mode: 'payment',
      payment_intent: null,
      payment_status: 'unpaid',
      status: 'open',
      success_url: typeof form.success_url === 'string' ? form.success_url : null,
      url: `https://checkout.example.test/c/pay/${id}`,
    }
    this.sessions.set(id, session)
    return session
  }

  private find(id: string): FakeSession {
    const session = this.sessions.get(id)
    if (!session) throw new ApiError(404, { type: 'invalid_request_error', code: 'resource_missing', param: 'session', message: `No such checkout.session: '${id}'` })
    return session
  }

  private expire(id: string): FakeSession {
    const session = this.find(id)
    if (session.status !== 'open') {
      throw new ApiError(400, { type: 'invalid_request_error', message: `This Checkout Session is ${session.status}; only an open session can be expired.` })
    }
    session.status = 'expired'
    session.url = null
    return session
  }
}

export interface WebhookDelivery {
  event: { id: string; type: string }
  /** The exact bytes to POST. */
  payload: string
  /** The `Provider-Signature` value: `t=…,v1=…`. */
  signature: string
}

/** An event for `session` as the processor delivers it, signed with the SDK's own helper. */
export function signedDelivery(
  session: FakeSession,
  type: string,
  options: { secret: string; timestamp: number; eventId?: string },
): WebhookDelivery {
  const event = {
    id: options.eventId ?? `evt_${randomId()}`,
    object: 'event',
    api_version: '2025-08-27.basil',
    created: options.timestamp,
    data: { object: structuredClone(session) },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  }
  const payload = JSON.stringify(event)
  return { event, payload, signature: signHeader(payload, options.secret, options.timestamp) }
}

/** `t=…,v1=…` for any bytes (a malformed body can be signed too). */
export function signHeader(payload: string, secret: string, timestamp: number): string {
  return sdk.webhooks.generateTestHeaderString({ payload, secret, timestamp })
}

// generateTestHeaderString needs no key; the instance never makes a request.
const sdk = new Stripe('sk_test_signing_only')

function randomId(length = 24): string {
  return crypto.randomBytes(length).toString('base64url').replace(/[-_]/g, 'x').slice(0, length)
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const value = req.headers[name]
  return Array.isArray(value) ? value[0] : value
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

/** `a[b][0][c]=v` form encoding into nested objects; all-numeric keys become arrays. */
export function parseForm(text: string): Record<string, unknown> {
  const root: Record<string, unknown> = {}
  for (const [key, value] of new URLSearchParams(text)) {
    const path = key.replace(/\]/g, '').split('[')
    let node: Record<string, unknown> = root
    for (const [i, part] of path.entries()) {
      if (i === path.length - 1) node[part] = value
      else node = (node[part] ??= {}) as Record<string, unknown>
    }
  }
  return arrays(root) as Record<string, unknown>
}

function arrays(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value
  const entries = Object.entries(value).map(([k, v]) => [k, arrays(v)] as const)
  if (entries.length > 0 && entries.every(([k]) => /^\d+$/.test(k))) {
    return entries.sort(([a], [b]) => Number(a) - Number(b)).map(([, v]) => v)
  }
  return Object.fromEntries(entries)
}
