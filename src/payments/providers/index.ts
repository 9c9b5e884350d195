/**
 * The enabled providers, from the settings (docs/payments.md, "Providers"). Several may be on at
 * once; the registry picks one per method.
 */
import { ConfigError } from '../../errors.js'
import type { PricingConfig } from '../pricing.js'
import { PAYMENT_METHODS, type PaymentMethod } from '../states.js'
import { CardProvider } from './card.js'
import { CryptoProvider, parseTokenContracts } from './crypto.js'
import type { PaymentProvider, ProviderContext } from './provider.js'
import { TestProvider } from './test.js'

export interface PaymentProviderSettings {
  /**
   * Unset (only `nodeplane up` leaves it unset): on when neither the card nor the crypto
   * provider is, so a configuration with a real provider never runs the test provider unless
   * it is enabled explicitly.
   */
  PAYMENT_TEST_PROVIDER_ENABLED?: boolean | undefined
  /** The methods the test provider takes; default every method. */
  PAYMENT_TEST_PROVIDER_METHODS?: readonly PaymentMethod[] | undefined
  PAYMENT_TEST_PROVIDER_DELAY: number
  PAYMENT_TEST_PROVIDER_FAILURE_RATE: number
  CARD_PROVIDER_ENABLED: boolean
  CARD_PROVIDER_SECRET_KEY?: string | undefined
  CARD_PROVIDER_WEBHOOK_SECRET?: string | undefined
  CARD_PROVIDER_API_URL?: string | undefined
  CRYPTO_PROVIDER_ENABLED: boolean
  CRYPTO_RECEIVER_ADDRESS?: string | undefined
  CRYPTO_RPC_URL?: string | undefined
  CRYPTO_TOKEN_CONTRACTS?: string | undefined
  CRYPTO_CONFIRMATIONS: number
  CRYPTO_POLL_INTERVAL: number
  CRYPTO_START_BLOCK?: number | undefined
}

export function paymentProvidersFromSettings(settings: PaymentProviderSettings, context: ProviderContext, pricing: PricingConfig): PaymentProvider[] {
  const problems: string[] = []
  const providers: PaymentProvider[] = []
  if (settings.CARD_PROVIDER_ENABLED) {
    if (!settings.CARD_PROVIDER_SECRET_KEY) problems.push('CARD_PROVIDER_SECRET_KEY: required when CARD_PROVIDER_ENABLED=true')
    if (!settings.CARD_PROVIDER_WEBHOOK_SECRET) problems.push('CARD_PROVIDER_WEBHOOK_SECRET: required when CARD_PROVIDER_ENABLED=true')
    if (settings.CARD_PROVIDER_SECRET_KEY && settings.CARD_PROVIDER_WEBHOOK_SECRET) {
      providers.push(
        new CardProvider({
          ...context,
          secretKey: settings.CARD_PROVIDER_SECRET_KEY,
          webhookSecret: settings.CARD_PROVIDER_WEBHOOK_SECRET,
          ...(settings.CARD_PROVIDER_API_URL ? { apiUrl: settings.CARD_PROVIDER_API_URL } : {}),
        }),
      )
    }
  }
  if (settings.CRYPTO_PROVIDER_ENABLED) {
    if (!settings.CRYPTO_RECEIVER_ADDRESS) problems.push('CRYPTO_RECEIVER_ADDRESS: required when CRYPTO_PROVIDER_ENABLED=true')
    if (!settings.CRYPTO_RPC_URL) problems.push('CRYPTO_RPC_URL: required when CRYPTO_PROVIDER_ENABLED=true')
    let contracts: ReturnType<typeof parseTokenContracts> | undefined
    try {
      contracts = parseTokenContracts(settings.CRYPTO_TOKEN_CONTRACTS ?? '')
      const missing = pricing.supportedCurrencies.filter((c) => !contracts?.has(c))
      if (missing.length > 0) problems.push(`CRYPTO_TOKEN_CONTRACTS: no contract for ${missing.join(', ')} (supported in the pricing file)`)
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err
      problems.push(...err.problems)
    }
    if (settings.CRYPTO_RECEIVER_ADDRESS && settings.CRYPTO_RPC_URL && contracts && problems.length === 0) {
      providers.push(
        new CryptoProvider({
          ...context,
          rpcUrl: settings.CRYPTO_RPC_URL,
          receiverAddress: settings.CRYPTO_RECEIVER_ADDRESS,
          contracts,
          confirmations: settings.CRYPTO_CONFIRMATIONS,
          pollIntervalMs: settings.CRYPTO_POLL_INTERVAL,
          ...(settings.CRYPTO_START_BLOCK !== undefined ? { startBlock: settings.CRYPTO_START_BLOCK } : {}),
        }),
      )
    }
  }
  if (testProviderEnabled(settings)) {
    const methods = settings.PAYMENT_TEST_PROVIDER_METHODS ?? PAYMENT_METHODS
    const real: Array<[boolean, PaymentMethod, string]> = [
      [settings.CARD_PROVIDER_ENABLED, 'card', 'CARD_PROVIDER_ENABLED'],
      [settings.CRYPTO_PROVIDER_ENABLED, 'crypto', 'CRYPTO_PROVIDER_ENABLED'],
    ]
    for (const [enabled, method, variable] of real) {
      if (enabled && methods.includes(method)) {
        problems.push(
          `PAYMENT_TEST_PROVIDER_METHODS: ${method} is taken by the ${method} provider (${variable}=true); ` +
            `list only methods no real provider takes${methods.length > 1 ? `, e.g. PAYMENT_TEST_PROVIDER_METHODS=${methods.filter((m) => m !== method).join(',')}` : ''}, or turn the test provider off`,
        )
      }
    }
    if (problems.length === 0) {
      providers.push(new TestProvider({ ...context, methods, delayMs: settings.PAYMENT_TEST_PROVIDER_DELAY, failureRate: settings.PAYMENT_TEST_PROVIDER_FAILURE_RATE }))
    }
  }
  if (problems.length > 0) throw new ConfigError(problems)
  return providers
}

/** PAYMENT_TEST_PROVIDER_ENABLED, or (unset) whether no real provider is on. */
export function testProviderEnabled(settings: Pick<PaymentProviderSettings, 'PAYMENT_TEST_PROVIDER_ENABLED' | 'CARD_PROVIDER_ENABLED' | 'CRYPTO_PROVIDER_ENABLED'>): boolean {
  return settings.PAYMENT_TEST_PROVIDER_ENABLED ?? (!settings.CARD_PROVIDER_ENABLED && !settings.CRYPTO_PROVIDER_ENABLED)
}
