/**
 * The crypto provider (payment service spec: method `crypto`; docs/payments-crypto.md).
 * InitiatePayment hands out where to pay: our receiver address, the token contract of the
 * payment's currency (for ETH the EthMemoRouter) and the chain id; the memo and the amount are
 * already on the payment. The background watcher (crypto-watcher.ts) completes the payment when
 * the `TransferWithMemo` log is confirmed; cancel and session expiry wait for it (cancelPayment).
 */
import { getAddress, isAddress } from 'ethers'
import { ConfigError, UnavailableError, ValidationError } from '../../errors.js'
import { CRYPTO_PROVIDER_NAME, CryptoWatcher, type CryptoWatcherOptions } from '../crypto-watcher.js'
import { PaymentPreconditionError } from '../errors.js'
import { isCryptoCurrency, type CryptoCurrency } from '../states.js'
import { findPaymentByProviderReference, type PaymentRecord } from '../store.js'
import type { PaymentProvider, ProviderContext, ProviderPaymentStatus, ProviderSession } from './provider.js'

/**
 * CRYPTO_TOKEN_CONTRACTS: comma-separated CURRENCY=0xaddress pairs, e.g.
 * `USDC=0x…,USDT=0x…,ETH=0x…` (ETH: the EthMemoRouter). Every problem is reported at once.
 */
export function parseTokenContracts(text: string, variable = 'CRYPTO_TOKEN_CONTRACTS'): Map<CryptoCurrency, string> {
  const contracts = new Map<CryptoCurrency, string>()
  const problems: string[] = []
  const entries = text.split(',').map((e) => e.trim())
  if (entries.every((e) => e === '')) problems.push(`${variable} is empty; expected CURRENCY=0xaddress pairs such as USDC=0x…,ETH=0x…`)
  else {
    for (const entry of entries) {
      const eq = entry.indexOf('=')
      if (eq < 0) {
        problems.push(`${variable}: "${entry.slice(0, 60)}" is not CURRENCY=0xaddress`)
        continue
      }
      const currency = entry.slice(0, eq).trim().toUpperCase()
      const address = entry.slice(eq + 1).trim()
      if (!isCryptoCurrency(currency)) problems.push(`${variable}: unknown currency "${entry.slice(0, Math.min(eq, 20))}" (USDC, USDT or ETH)`)
      else if (!isAddress(address)) problems.push(`${variable}: ${currency} contract "${entry.slice(eq + 1, eq + 61).trim()}" is not an address (0x and 40 hex digits)`)
      else if (contracts.has(currency)) problems.push(`${variable}: ${currency} is given twice`)
      else contracts.set(currency, getAddress(address.toLowerCase()))
    }
    const seen = new Map<string, CryptoCurrency>()
    for (const [currency, address] of contracts) {
      const other = seen.get(address)
      // A log's contract decides its currency, so one contract cannot stand for two.
      if (other) problems.push(`${variable}: ${other} and ${currency} share contract ${address}`)
      seen.set(address, currency)
    }
  }
  if (problems.length > 0) throw new ConfigError(problems)
  return contracts
}

export interface CryptoProviderOptions extends ProviderContext {
  rpcUrl: string
  receiverAddress: string
  contracts: ReadonlyMap<CryptoCurrency, string>
  confirmations: number
  pollIntervalMs: number
  startBlock?: number
  maxBlockRange?: number
}

export class CryptoProvider implements PaymentProvider {
  readonly name = CRYPTO_PROVIDER_NAME
  readonly methods = ['crypto'] as const
  readonly watcher: CryptoWatcher
  private readonly receiverAddress: string

  constructor(private readonly options: CryptoProviderOptions) {
    const problems: string[] = []
    if (!isAddress(options.receiverAddress)) problems.push('CRYPTO_RECEIVER_ADDRESS is not an address (0x and 40 hex digits)')
    if (options.contracts.size === 0) problems.push('CRYPTO_TOKEN_CONTRACTS names no contract')
    if (!Number.isInteger(options.confirmations) || options.confirmations < 0) problems.push('CRYPTO_CONFIRMATIONS must be a whole number >= 0')
    if (problems.length > 0) throw new ConfigError(problems)
    this.receiverAddress = getAddress(options.receiverAddress.toLowerCase())
    const watcherOptions: CryptoWatcherOptions = { ...options, receiverAddress: this.receiverAddress }
    this.watcher = new CryptoWatcher(watcherOptions)
  }

  async initiatePayment(payment: PaymentRecord): Promise<ProviderSession> {
    if (!payment.crypto) throw new ValidationError(`payment ${payment.id} has no crypto currency`, 'method crypto needs crypto_currency')
    const contractAddress = this.options.contracts.get(payment.crypto.currency)
    if (!contractAddress) {
      throw new PaymentPreconditionError(
        `no ${payment.crypto.currency} contract is configured for the crypto provider`,
        `add ${payment.crypto.currency}=0x… to CRYPTO_TOKEN_CONTRACTS, or remove ${payment.crypto.currency} from crypto.supported_currencies in the pricing file`,
      )
    }
    return {
      providerReference: payment.crypto.memo,
      crypto: { receiverAddress: this.receiverAddress, contractAddress, chainId: await this.watcher.chainId() },
    }
  }

  /** Our own record: the chain is read by the watcher, not per request. */
  async getPaymentStatus(providerReference: string): Promise<ProviderPaymentStatus> {
    const row = (await this.options.db('payments').where({ provider: this.name, provider_reference: providerReference.toLowerCase() }).first('status')) as { status: ProviderPaymentStatus } | undefined
    return row?.status ?? 'unknown'
  }

  /**
   * Nothing is held on chain per payment; what a cancel must not do is overtake a transfer the
   * watcher has not applied yet (it lags by the confirmation depth at least, more when the RPC
   * or the service was down). Session expiry: a transfer mined before `expires_at` pays the
   * payment, so the payment expires only once the watcher has applied every block stamped before
   * `expires_at` (the cursor block's timestamp is at or past it); until then this throws and the
   * payment stays pending. A cancel asked before expiry: `paid` when a transfer paying it in
   * full is in the blocks not applied yet, confirmed or not. A transfer mined after the cancel
   * (or in a block stamped at or after `expires_at`, once expired) is recorded as `late`.
   */
  async cancelPayment(providerReference: string): Promise<'closed' | 'paid'> {
    const payment = await findPaymentByProviderReference(this.options.db, this.name, providerReference.toLowerCase())
    if (payment?.status !== 'pending') return 'closed'
    if (this.options.now().getTime() < payment.expiresAt.getTime()) return (await this.watcher.findUnappliedPayment(payment)) ? 'paid' : 'closed'
    const appliedUntil = await this.watcher.appliedUntil()
    if (!appliedUntil || appliedUntil.getTime() < payment.expiresAt.getTime()) {
      throw new UnavailableError(
        `payment ${payment.id} expired at ${payment.expiresAt.toISOString()} but the crypto watcher has applied the chain only up to ${appliedUntil?.toISOString() ?? 'nothing yet'}`,
        'it expires once the watcher has applied every block stamped before its expiry (a transfer may still be in the blocks not applied yet)',
      )
    }
    return 'closed'
  }

  async start(): Promise<void> {
    this.watcher.start()
  }

  async stop(): Promise<void> {
    await this.watcher.stop()
  }

  health(): Promise<{ ok: true } | { ok: false; error: string }> {
    return this.watcher.health()
  }
}
