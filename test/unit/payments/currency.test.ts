import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { formatMoney } from '../../../src/cli/payments.js'
import { ConfigError } from '../../../src/errors.js'
import { currencyExponent, formatMinorUnits, isKnownCurrency } from '../../../src/payments/currency.js'
import { cryptoBaseUnits, loadPricingConfig, parsePricingConfig } from '../../../src/payments/pricing.js'

/** One node for a month, priced at what 25 USDC (0.01 ETH) is worth in each currency. */
const CASES = [
  { currency: 'JPY', exponent: 0, price: 3_750, shown: '3750 JPY', usdc: '150.00', eth: '375000.00' },
  { currency: 'USD', exponent: 2, price: 2_500, shown: '25.00 USD', usdc: '1.00', eth: '2500.00' },
  { currency: 'KWD', exponent: 3, price: 7_700, shown: '7.700 KWD', usdc: '0.308', eth: '770.000' },
] as const

const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

function refusal(fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return (err as ConfigError).problems.join('\n')
  }
  throw new Error('expected a ConfigError')
}

describe('minor units per currency (ISO 4217 exponent)', () => {
  it.each(CASES)('$currency: prices, crypto amounts and the CLI use its minor unit', ({ currency, exponent, price, shown, usdc, eth }) => {
    expect(currencyExponent(currency)).toBe(exponent)
    const pricing = parsePricingConfig({ currency, pricing: { devnet: { full: { '1m': price } } }, crypto: { supported_currencies: ['USDC', 'ETH'], exchange_rates: { USDC: usdc, ETH: eth } } })
    expect(cryptoBaseUnits(pricing, 'USDC', price)).toBe(25_000_000n)
    expect(cryptoBaseUnits(pricing, 'ETH', price)).toBe(10n ** 16n)
    expect(formatMinorUnits(price, currency)).toBe(shown)
    expect(formatMoney(price, currency)).toBe(shown)
  })

  it('rounds a crypto amount up, never below the price', () => {
    const pricing = parsePricingConfig({ currency: 'JPY', pricing: { devnet: { full: { '1m': 1 } } }, crypto: { supported_currencies: ['USDC'], exchange_rates: { USDC: '150.00' } } })
    // 1 yen = 0.006666… USDC -> 6667 base units (6 decimals).
    expect(cryptoBaseUnits(pricing, 'USDC', 1)).toBe(6_667n)
  })

  it('formats small, negative and unknown-currency amounts without guessing', () => {
    expect(formatMinorUnits(5, 'USD')).toBe('0.05 USD')
    expect(formatMinorUnits(5, 'KWD')).toBe('0.005 KWD')
    expect(formatMinorUnits(-1_234, 'USD')).toBe('-12.34 USD')
    expect(formatMinorUnits(0, 'JPY')).toBe('0 JPY')
    expect(formatMinorUnits(1_500, 'XYZ')).toBe('1500 XYZ (minor units)')
    expect(isKnownCurrency('XYZ')).toBe(false)
    expect(() => currencyExponent('XYZ')).toThrow('unknown currency "XYZ"')
  })

  it('refuses a pricing currency that is not ISO 4217, naming the file and the key', () => {
    const source = { pricing: { devnet: { full: { '1m': 100 } } }, crypto: { supported_currencies: ['USDC'], exchange_rates: { USDC: '1.00' } } }
    // Intl formats any three letters (as if they had 2 decimals): the code must be one it knows.
    expect(refusal(() => parsePricingConfig({ ...source, currency: 'XYZ' }))).toBe('pricing configuration: currency "XYZ" is not an ISO 4217 currency code (such as USD, EUR, JPY, KWD)')
    expect(refusal(() => parsePricingConfig({ ...source, currency: 'usd' }))).toMatch(/^pricing configuration: currency must be an ISO 4217 code/)

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-pricing-'))
    dirs.push(dir)
    const file = path.join(dir, 'pricing.yaml')
    fs.writeFileSync(file, 'currency: XBT\npricing:\n  devnet:\n    full:\n      1m: 100\ncrypto:\n  supported_currencies: [USDC]\n  exchange_rates: { USDC: "1.00" }\n')
    expect(refusal(() => loadPricingConfig(file))).toBe(`${file}: currency "XBT" is not an ISO 4217 currency code (such as USD, EUR, JPY, KWD)`)
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('XBT', 'KWD'))
    expect(loadPricingConfig(file).currency).toBe('KWD')
  })
})
