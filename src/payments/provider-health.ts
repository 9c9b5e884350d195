/**
 * The payment service's /readyz components, one per enabled provider (`provider:<name>`), each
 * with the methods it takes:
 * - card: the processor answers and accepts our secret key (CardProvider.health);
 * - crypto: the chain's RPC answers, the watcher is not halted by a deep reorg, and it has
 *   finished a poll within CRYPTO_LAG_LIMIT (ten poll intervals, at least a minute) — a
 *   watcher that stopped keeping up leaves payments pending while the RPC looks fine;
 * - test: always up, with a warning: it completes payments without any money, so an operator
 *   sees it is on wherever it runs.
 * A provider that is down makes the service not ready (503), named in `details`.
 */
import type { ComponentCheck, ComponentStatus } from '../http/readiness.js'
import { CryptoProvider } from './providers/crypto.js'
import type { PaymentProvider } from './providers/provider.js'
import { TestProvider } from './providers/test.js'

export const TEST_PROVIDER_WARNING = 'the test provider is on: payments of these methods complete without any money; never enable it in production'

export function cryptoLagLimitMs(pollIntervalMs: number): number {
  return Math.max(60_000, 10 * pollIntervalMs)
}

export interface ProviderReadinessOptions {
  now: () => Date
  /** CRYPTO_POLL_INTERVAL: the crypto watcher is lagging after cryptoLagLimitMs of it without a finished poll. */
  cryptoPollIntervalMs: number
}

export function providerReadiness(providers: readonly PaymentProvider[], options: ProviderReadinessOptions): Record<string, ComponentCheck> {
  // The watcher's first poll is measured from here (the providers have just been started).
  const since = options.now()
  return Object.fromEntries(providers.map((provider) => [`provider:${provider.name}`, () => providerStatus(provider, since, options)]))
}

async function providerStatus(provider: PaymentProvider, since: Date, options: ProviderReadinessOptions): Promise<ComponentStatus> {
  const methods = [...provider.methods]
  if (provider instanceof TestProvider) return { status: 'up', methods, warning: TEST_PROVIDER_WARNING }
  const health = provider.health ? await provider.health() : ({ ok: true } as const)
  if (!health.ok) return { status: 'down', methods, error: health.error }
  if (provider instanceof CryptoProvider) {
    const limit = cryptoLagLimitMs(options.cryptoPollIntervalMs)
    const last = provider.watcher.lastSuccessfulPollAt ?? since
    const behind = options.now().getTime() - last.getTime()
    if (behind > limit) {
      const when = provider.watcher.lastSuccessfulPollAt ? `since ${last.toISOString()}` : 'since the service started'
      return { status: 'down', methods, error: `the crypto watcher is lagging: no poll has finished ${when} (${Math.round(behind / 1000)} s, limit ${Math.round(limit / 1000)} s)` }
    }
  }
  return { status: 'up', methods }
}
