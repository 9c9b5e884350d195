/**
 * The payment service started on its own (`nodeplane daemon payment-service`, not `nodeplane
 * up`) with the test provider on (issue 22, item 5): every payment it takes completes without any
 * money moving. Allowed — a staging stack runs it so (docs/payments.md) — but said at start, so a
 * production host configured so by mistake shows it in its first log lines.
 */
import type { Logger } from '../../log.js'
import { PAYMENT_METHODS, type PaymentMethod } from '../states.js'
import { testProviderEnabled, type PaymentProviderSettings } from './index.js'

export const TEST_PROVIDER_WARNING = 'the test payment provider is enabled: payments it takes complete without any money moving; never enable it in production'

export function warnIfTestProviderEnabled(
  settings: Pick<PaymentProviderSettings, 'PAYMENT_TEST_PROVIDER_ENABLED' | 'PAYMENT_TEST_PROVIDER_METHODS' | 'CARD_PROVIDER_ENABLED' | 'CRYPTO_PROVIDER_ENABLED'>,
  logger: Logger,
): boolean {
  if (!testProviderEnabled(settings)) return false
  const methods: readonly PaymentMethod[] = settings.PAYMENT_TEST_PROVIDER_METHODS ?? PAYMENT_METHODS
  logger.warn({ variable: 'PAYMENT_TEST_PROVIDER_ENABLED', methods }, TEST_PROVIDER_WARNING)
  return true
}
