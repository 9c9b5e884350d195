/**
 * Providers chosen by method (payment service spec: "several are active at once"). Each provider
 * takes exactly the methods it is configured for; a method two providers claim is a
 * configuration error, so no provider silently takes payments meant for another (issue 15: the
 * test provider completed crypto payments for free while the card provider was on).
 */
import { ConfigError } from '../../errors.js'
import { PaymentPreconditionError } from '../errors.js'
import { PAYMENT_METHODS, type PaymentMethod } from '../states.js'
import type { PaymentProvider } from './provider.js'

export class ProviderRegistry {
  constructor(readonly providers: readonly PaymentProvider[]) {
    const names = new Set<string>()
    const owners = new Map<PaymentMethod, string>()
    const problems: string[] = []
    for (const p of providers) {
      if (names.has(p.name)) throw new Error(`payment provider "${p.name}" registered twice`)
      names.add(p.name)
      for (const method of p.methods) {
        const owner = owners.get(method)
        if (owner) problems.push(`method ${method} is taken by both the ${owner} and the ${p.name} provider; give each method one provider (PAYMENT_TEST_PROVIDER_METHODS lists the test provider's)`)
        else owners.set(method, p.name)
      }
    }
    if (problems.length > 0) throw new ConfigError(problems)
  }

  /** The provider for `method`; PaymentPreconditionError when none is enabled for it. */
  forMethod(method: PaymentMethod): PaymentProvider {
    const provider = this.providers.find((p) => p.methods.includes(method))
    if (!provider) throw new PaymentPreconditionError(`no payment provider is enabled for method ${method}`, `enabled methods: ${this.methods().join(', ') || 'none'}`)
    return provider
  }

  byName(name: string): PaymentProvider | undefined {
    return this.providers.find((p) => p.name === name)
  }

  /** Methods some enabled provider accepts, in the spec's order (card, crypto). */
  methods(): PaymentMethod[] {
    return PAYMENT_METHODS.filter((m) => this.providers.some((p) => p.methods.includes(m)))
  }
}
