/**
 * Every chain the shipped catalogue offers can be bought: pricing.yaml, read by the payment
 * service from the same config dir, has a price for each of its node types and durations. A
 * chain without one is refused at `subscription create` ("no price for …"), so a new profile
 * needs its prices in the same change (docs/chains.md, "Adding a chain").
 */
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { defaultConfigDir, loadChainCatalogue } from '../../../src/config/chains.js'
import { loadPricingConfig } from '../../../src/payments/pricing.js'

describe('the shipped catalogue and pricing', () => {
  it('price every node type and duration of every chain', async () => {
    const catalogue = await loadChainCatalogue(defaultConfigDir())
    const pricing = loadPricingConfig(path.join(defaultConfigDir(), 'pricing.yaml'))
    const offered: string[] = []
    const missing: string[] = []
    for (const [id, profile] of catalogue.profiles) {
      for (const nodeType of Object.keys(profile.node_types)) {
        for (const duration of Object.keys(profile.durations)) {
          const item = `${id}/${nodeType}/${duration}`
          offered.push(item)
          const price = pricing.pricing[id]?.[nodeType]?.[duration as keyof (typeof pricing.pricing)[string][string]]
          if (!(typeof price === 'number' && price > 0)) missing.push(item)
        }
      }
    }
    expect(offered).toEqual(expect.arrayContaining(['devnet/full/1w', 'ethereum-anvil/full/1w', 'litecoin/full/1w', 'litecoin/archive/6m']))
    expect(missing).toEqual([])
  })
})
