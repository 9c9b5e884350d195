import { describe, expect, it } from 'vitest'
import { formatTokenAmount, parseTokenAmount, TOKEN_DECIMALS } from '../../../src/payments/pricing.js'
import { CRYPTO_CURRENCIES } from '../../../src/payments/states.js'

describe('token amounts (a quote stores them formatted; a payment pays them in base units)', () => {
  it('round-trips every supported currency exactly', () => {
    for (const currency of CRYPTO_CURRENCIES) {
      for (const base of [0n, 1n, 4_500_000n, 10n ** BigInt(TOKEN_DECIMALS[currency]) * 3n + 7n, 123_456_789_012_345_678_901n]) {
        expect(parseTokenAmount(currency, formatTokenAmount(currency, base)), `${currency} ${base}`).toBe(base)
      }
    }
    expect(formatTokenAmount('ETH', 5_000_000_000_000_000n)).toBe('0.005000000000000000')
    expect(parseTokenAmount('USDC', '15.000000')).toBe(15_000_000n)
  })

  it('refuses an amount with the wrong number of decimals rather than scaling it', () => {
    expect(() => parseTokenAmount('USDC', '15.0000000')).toThrow('not a USDC amount with 6 decimals')
    expect(() => parseTokenAmount('ETH', '0.005')).toThrow('not a ETH amount with 18 decimals')
    expect(() => parseTokenAmount('USDC', '1e6')).toThrow()
  })
})
