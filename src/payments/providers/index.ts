/**
 * The enabled providers, from the settings (docs/payments.md, "Providers"). Several may be on at
 * once; the registry picks one per method.
 */
import { ConfigError } from '../../errors.js'
import type { PricingConfig } from '../pricing.js'
import { CardProvider } from './card.js'
import { CryptoProvider, parseTokenContracts } from './crypto.js'
import type { PaymentProvider, ProviderContext } from './provider.js'
import { TestProvider } from './test.js'

export interface PaymentProviderSettings {
  PAYMENT_TEST_PROVIDER_ENABLED: boolean
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
  if (problems.length > 0) throw new ConfigError(problems)
  if (settings.PAYMENT_TEST_PROVIDER_ENABLED) {
    providers.push(new TestProvider({ ...context, delayMs: settings.PAYMENT_TEST_PROVIDER_DELAY, failureRate: settings.PAYMENT_TEST_PROVIDER_FAILURE_RATE }))
  }
  return providers
}
