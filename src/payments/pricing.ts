/**
 * The pricing configuration (payment service spec, "Pricing configuration shape"), read from a
 * YAML file (default `<config dir>/pricing.yaml`; docs/payments.md):
 *
 *   currency: USD                       # the ISO 4217 currency of every price
 *   pricing:
 *     <chain_profile_id>:
 *       <node_type>:
 *         <duration>: <integer minor units>   # of `currency`: cents for USD, yen for JPY, fils for KWD
 *   crypto:
 *     supported_currencies: [USDC, USDT, ETH]
 *     exchange_rates: { USDC: "1.00", ETH: "3000.00" }   # fiat per one whole token
 *     quote_validity: 15m
 *   session:
 *     expiry: 30m
 */
import fs from 'node:fs'
import { parse as parseYaml } from 'yaml'
import { z } from 'zod'
import { parseDuration } from '../config/duration.js'
import { ConfigError, ValidationError } from '../errors.js'
import { currencyExponent, isKnownCurrency } from './currency.js'
import { CRYPTO_CURRENCIES, type CryptoCurrency } from './states.js'

export const DURATIONS = ['1w', '2w', '1m', '3m', '6m'] as const

/** Decimals of each supported token's base unit (ERC-20 USDC/USDT: 6; ETH: wei). */
export const TOKEN_DECIMALS: Readonly<Record<CryptoCurrency, number>> = { USDC: 6, USDT: 6, ETH: 18 }

const identifier = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,99}$/, 'must be lower-case letters, digits, - or _')
const minorUnits = z.number().int('must be whole minor units of the currency (cents for USD)').positive().max(Number.MAX_SAFE_INTEGER)
const durationText = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((text, ctx) => {
      const ms = parseDuration(text)
      if (ms === null || ms <= 0) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${text}" is not a duration such as 15m` })
        return z.NEVER
      }
      return ms
    })
const rate = z.string().regex(/^\d{1,12}(\.\d{1,18})?$/, 'must be a positive decimal string such as "3000.00"').refine((v) => /[1-9]/.test(v), 'must be greater than zero')

const pricingSchema = z
  .object({
    currency: z
      .string()
      .regex(/^[A-Z]{3}$/, 'must be an ISO 4217 code such as USD')
      .refine(isKnownCurrency, (code) => ({ message: `"${code}" is not an ISO 4217 currency code (such as USD, EUR, JPY, KWD)` }))
      .default('USD'),
    pricing: z.record(identifier, z.record(identifier, z.record(z.enum(DURATIONS), minorUnits))),
    crypto: z
      .object({
        supported_currencies: z.array(z.enum(CRYPTO_CURRENCIES)).default([...CRYPTO_CURRENCIES]),
        exchange_rates: z.record(z.enum(CRYPTO_CURRENCIES), rate).default({}),
        quote_validity: durationText('15m'),
      })
      .strict()
      .default({}),
    session: z.object({ expiry: durationText('30m') }).strict().default({}),
  })
  .strict()
  .superRefine((config, ctx) => {
    for (const currency of config.crypto.supported_currencies) {
      if (!config.crypto.exchange_rates[currency]) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, path: ['crypto', 'exchange_rates', currency], message: `is required: ${currency} is a supported currency` })
      }
    }
  })

export interface PricingConfig {
  currency: string
  pricing: Record<string, Record<string, Partial<Record<(typeof DURATIONS)[number], number>>>>
  supportedCurrencies: CryptoCurrency[]
  exchangeRates: Partial<Record<CryptoCurrency, string>>
  quoteValidityMs: number
  sessionExpiryMs: number
}

export function parsePricingConfig(data: unknown, source = 'pricing configuration'): PricingConfig {
  const parsed = pricingSchema.safeParse(data)
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${source}: ${i.path.join('.') || '(root)'} ${i.message}`))
  }
  const c = parsed.data
  return {
    currency: c.currency,
    pricing: c.pricing,
    supportedCurrencies: c.crypto.supported_currencies,
    exchangeRates: c.crypto.exchange_rates,
    quoteValidityMs: c.crypto.quote_validity,
    sessionExpiryMs: c.session.expiry,
  }
}

export function loadPricingConfig(file: string): PricingConfig {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    throw new ConfigError([`pricing file ${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'not found' : (err as Error).message}`])
  }
  let data: unknown
  try {
    data = parseYaml(text)
  } catch (err) {
    throw new ConfigError([`pricing file ${file}: not valid YAML (${(err as Error).message.split('\n')[0]})`])
  }
  return parsePricingConfig(data, file)
}

export interface PriceItem {
  chain_profile_id: string
  node_type: string
  duration: string
}

export interface PricedItem extends PriceItem {
  unit_price_minor: number
}

/** Maximum line items per payment or quote (the spec leaves it open; docs/payments.md). */
export const MAX_ITEMS = 20

/** Price lookup (chain profile id, node type, duration); an unknown item is a ValidationError. */
export function priceItem(config: PricingConfig, item: PriceItem): PricedItem {
  const price = config.pricing[item.chain_profile_id]?.[item.node_type]?.[item.duration as (typeof DURATIONS)[number]]
  if (price === undefined) {
    throw new ValidationError(
      `no price for ${item.chain_profile_id}/${item.node_type}/${item.duration}`,
      'the pricing configuration has no entry for this chain profile, node type and duration',
    )
  }
  return { chain_profile_id: item.chain_profile_id, node_type: item.node_type, duration: item.duration, unit_price_minor: price }
}

export function priceItems(config: PricingConfig, items: readonly PriceItem[]): { items: PricedItem[]; amountMinor: number } {
  if (items.length === 0) throw new ValidationError('items must not be empty')
  if (items.length > MAX_ITEMS) throw new ValidationError(`at most ${MAX_ITEMS} items per payment`)
  const priced = items.map((item) => priceItem(config, item))
  return { items: priced, amountMinor: priced.reduce((sum, i) => sum + i.unit_price_minor, 0) }
}

export function assertSupportedCurrency(config: PricingConfig, currency: string): CryptoCurrency {
  const supported = config.supportedCurrencies as string[]
  if (!supported.includes(currency)) {
    throw new ValidationError(`unsupported crypto currency "${currency.slice(0, 20)}"`, `supported: ${config.supportedCurrencies.join(', ') || 'none'}`)
  }
  return currency as CryptoCurrency
}

function decimalToFraction(text: string): { numerator: bigint; scale: bigint } {
  const [whole = '0', fraction = ''] = text.split('.')
  return { numerator: BigInt(whole + fraction), scale: 10n ** BigInt(fraction.length) }
}

/**
 * The crypto amount owed for `amountMinor` minor units of the pricing currency, in the token's
 * base units, rounded up (the payer never pays less than the price):
 * base = ceil(minor / 10^exponent / rate * 10^decimals), the exponent being the currency's
 * (ISO 4217: USD 2, JPY 0, KWD 3).
 */
export function cryptoBaseUnits(config: PricingConfig, currency: CryptoCurrency, amountMinor: number): bigint {
  const rateText = config.exchangeRates[currency]
  if (!rateText) throw new ValidationError(`no exchange rate for ${currency}`)
  const { numerator, scale } = decimalToFraction(rateText)
  const top = BigInt(amountMinor) * 10n ** BigInt(TOKEN_DECIMALS[currency]) * scale
  const bottom = 10n ** BigInt(currencyExponent(config.currency)) * numerator
  return (top + bottom - 1n) / bottom
}

/** formatTokenAmount's inverse: "0.004500000000000000" ETH -> 4500000000000000n. */
export function parseTokenAmount(currency: CryptoCurrency, amount: string): bigint {
  const decimals = TOKEN_DECIMALS[currency]
  const match = new RegExp(`^(\\d+)\\.(\\d{${decimals}})$`).exec(amount)
  if (!match) throw new Error(`not a ${currency} amount with ${decimals} decimals: ${amount.slice(0, 40)}`)
  return BigInt(`${match[1]}${match[2]}`)
}

/** Base units as a decimal string in whole tokens, e.g. 25000000n USDC -> "25.000000". */
export function formatTokenAmount(currency: CryptoCurrency, baseUnits: bigint): string {
  const decimals = TOKEN_DECIMALS[currency]
  const text = baseUnits.toString().padStart(decimals + 1, '0')
  return `${text.slice(0, text.length - decimals)}.${text.slice(text.length - decimals)}`
}
