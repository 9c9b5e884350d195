/**
 * Providers chosen by method (payment service spec: "several are active at once"). A provider
 * that names the method wins; the test provider (methods `any`) takes what no other provider
 * does, so `nodeplane up` can try both methods without real processors.
 */
import { PaymentPreconditionError } from '../errors.js'
import { PAYMENT_METHODS, type PaymentMethod } from '../states.js'
import type { PaymentProvider } from './provider.js'

export class ProviderRegistry {
  constructor(readonly providers: readonly PaymentProvider[]) {
    const names = new Set<string>()
    for (const p of providers) {
      if (names.has(p.name)) throw new Error(`payment provider "${p.name}" registered twice`)
      names.add(p.name)
    }
  }

  /** The provider for `method`; PaymentPreconditionError when none is enabled for it. */
  forMethod(method: PaymentMethod): PaymentProvider {
    const provider = this.providers.find((p) => p.methods !== 'any' && p.methods.includes(method)) ?? this.providers.find((p) => p.methods === 'any')
    if (!provider) throw new PaymentPreconditionError(`no payment provider is enabled for method ${method}`, `enabled methods: ${this.methods().join(', ') || 'none'}`)
    return provider
  }

  byName(name: string): PaymentProvider | undefined {
    return this.providers.find((p) => p.name === name)
  }

  /** Methods some enabled provider accepts, in the spec's order (card, crypto). */
  methods(): PaymentMethod[] {
    return PAYMENT_METHODS.filter((m) => this.providers.some((p) => p.methods === 'any' || p.methods.includes(m)))
  }
}
