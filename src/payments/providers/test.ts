/**
 * The test provider (spec: "accepts any method with configurable delay and failure rate"): the
 * default of `nodeplane up` while no real provider is on. It takes only the methods it is given
 * (PAYMENT_TEST_PROVIDER_METHODS), never one it was not asked to handle: a payment it takes is
 * completed without any money moving. A payment it holds settles `delay` after creation: pending ->
 * processing -> completed, or -> failed for a share of payments given by the failure rate. The
 * choice is a hash of the payment id, so it is the same on every replica and after a restart
 * (rate 0: never fails; 1: always).
 */
import crypto from 'node:crypto'
import { PAYMENT_METHODS, type PaymentMethod } from '../states.js'
import { findPaymentForUpdate, transitionPayment, type PaymentRecord } from '../store.js'
import type { PaymentProvider, ProviderContext, ProviderPaymentStatus, ProviderSession } from './provider.js'

export interface TestProviderOptions extends ProviderContext {
  /** The methods it takes; default every method. */
  methods?: readonly PaymentMethod[]
  delayMs: number
  /** 0.0 - 1.0 */
  failureRate: number
  /** How often due payments are looked for. */
  pollIntervalMs?: number
}

/** Where a crypto payment through the test provider "goes": nowhere real. */
export const TEST_RECEIVER_ADDRESS = '0x000000000000000000000000000000000000dEaD'

export function failsAtRate(paymentId: string, failureRate: number): boolean {
  const bucket = crypto.createHash('sha256').update(paymentId).digest().readUInt32BE(0) / 0x1_0000_0000
  return bucket < failureRate
}

export class TestProvider implements PaymentProvider {
  readonly name = 'test'
  readonly methods: readonly PaymentMethod[]
  private timer: NodeJS.Timeout | undefined
  private running: Promise<number> | undefined

  constructor(private readonly options: TestProviderOptions) {
    this.methods = [...new Set(options.methods ?? PAYMENT_METHODS)]
  }

  async initiatePayment(payment: PaymentRecord): Promise<ProviderSession> {
    return {
      providerReference: `test_${payment.id}`,
      checkoutUrl: null,
      ...(payment.method === 'crypto' ? { crypto: { receiverAddress: TEST_RECEIVER_ADDRESS, contractAddress: null, chainId: null } } : {}),
    }
  }

  async getPaymentStatus(providerReference: string): Promise<ProviderPaymentStatus> {
    const row = (await this.options.db('payments').where({ provider: this.name, provider_reference: providerReference }).first('status')) as { status: string } | undefined
    return (row?.status as ProviderPaymentStatus | undefined) ?? 'unknown'
  }

  async cancelPayment(): Promise<'closed'> {
    // Nothing is held outside our database.
    return 'closed'
  }

  /** Settles every pending test payment whose delay has passed; returns how many. */
  settleDue(limit = 100): Promise<number> {
    if (this.running) return this.running
    this.running = this.settle(limit).finally(() => {
      this.running = undefined
    })
    return this.running
  }

  private async settle(limit: number): Promise<number> {
    const { db, now } = this.options
    const cutoff = new Date(now().getTime() - this.options.delayMs)
    // Only its methods: a payment of another method (left by an earlier configuration) is not settled for free.
    const due = (await db('payments').where({ provider: this.name, status: 'pending' }).whereIn('method', this.methods).where('created_at', '<=', cutoff).orderBy('created_at').limit(limit).select('id')) as Array<{ id: string }>
    let settled = 0
    for (const { id } of due) {
      const done = await db.transaction(async (trx) => {
        const payment = await findPaymentForUpdate(trx, id)
        if (payment?.status !== 'pending') return false
        const at = now()
        const context = { actor: 'provider:test' }
        if (failsAtRate(id, this.options.failureRate)) {
          await transitionPayment(trx, { paymentId: id, via: 'processing', to: 'failed', context, failureReason: 'declined by the test provider (failure rate)', now: at }, payment)
        } else {
          await transitionPayment(trx, { paymentId: id, via: 'processing', to: 'completed', context, now: at }, payment)
        }
        return true
      })
      if (done) settled++
    }
    return settled
  }

  async start(): Promise<void> {
    const interval = this.options.pollIntervalMs ?? Math.max(50, Math.min(1_000, this.options.delayMs))
    this.timer = setInterval(() => {
      this.settleDue().catch((err: unknown) => this.options.logger.error({ err }, 'test provider could not settle payments'))
    }, interval)
    this.timer.unref()
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
    await this.running?.catch(() => undefined)
  }
}
