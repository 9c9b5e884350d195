/**
 * Fiat currencies and their minor units. A price is an integer of the currency's minor unit,
 * whose size is the ISO 4217 exponent: USD 2 (cents), JPY 0 (yen), KWD 3 (fils). The runtime's
 * Intl data (ICU) knows every code and exponent, so there is no table of ours to keep current.
 */

const KNOWN = new Set(Intl.supportedValuesOf('currency'))
const exponents = new Map<string, number>()

/** An ISO 4217 code the runtime knows (Intl accepts any well-formed code, and guesses 2 for it). */
export function isKnownCurrency(code: string): boolean {
  return KNOWN.has(code)
}

/** Digits after the decimal point of `currency`'s major unit: 2 for USD, 0 for JPY, 3 for KWD. */
export function currencyExponent(currency: string): number {
  let exponent = exponents.get(currency)
  if (exponent === undefined) {
    if (!isKnownCurrency(currency)) throw new Error(`unknown currency "${currency.slice(0, 20)}"`)
    exponent = new Intl.NumberFormat('en', { style: 'currency', currency }).resolvedOptions().maximumFractionDigits ?? 2
    exponents.set(currency, exponent)
  }
  return exponent
}

/**
 * An amount in minor units as a decimal in the major unit with the currency's own digits:
 * 1500 USD -> "15.00 USD", 1500 JPY -> "1500 JPY", 1500 KWD -> "1.500 KWD". A currency the
 * runtime does not know is shown as the bare integer, "1500 XYZ (minor units)", never guessed.
 */
export function formatMinorUnits(amountMinor: number, currency: string): string {
  if (!isKnownCurrency(currency)) return `${amountMinor} ${currency} (minor units)`
  const exponent = currencyExponent(currency)
  const sign = amountMinor < 0 ? '-' : ''
  const digits = String(Math.abs(amountMinor)).padStart(exponent + 1, '0')
  const major = exponent === 0 ? digits : `${digits.slice(0, digits.length - exponent)}.${digits.slice(digits.length - exponent)}`
  return `${sign}${major} ${currency}`
}
