/**
 * Guards in the payments database itself (issue 15, item 11), so no writer (a bug, a manual
 * fix, a future job) can store a payment the service would not: CHECK constraints for the
 * payment status and method, positive amounts, and known currencies (the fiat currency is an
 * ISO 4217 code, three capital letters; the crypto currency one of USDC, USDT, ETH). Plus
 * `payment_retries`, the per-payment back-off of the expiry and reconciliation jobs, and an
 * index for the purge of old `provider_events`.
 *
 * SQLite cannot add a constraint to a table; knex rebuilds the table there (copy, drop, rename,
 * indexes recreated). Existing rows that break a rule stop the migration with a message naming
 * the table and how many rows, before anything is changed.
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0003_guards'

const STATUSES = ['pending', 'processing', 'completed', 'failed', 'canceled']
const METHODS = ['card', 'crypto']
const CRYPTO_CURRENCIES = ['USDC', 'USDT', 'ETH']
const LETTERS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'

/** Three capital letters A-Z, written with `replace` and `length` only: the same SQL on both databases. */
function isoCurrency(column: string): string {
  let stripped = column
  for (const letter of LETTERS) stripped = `replace(${stripped}, '${letter}', '')`
  return `length(${column}) = 3 and ${stripped} = ''`
}

const inList = (column: string, values: readonly string[]) => `${column} in (${values.map((v) => `'${v}'`).join(', ')})`

const GUARDS: Record<string, Array<[constraint: string, predicate: string]>> = {
  payments: [
    ['payments_status_check', inList('status', STATUSES)],
    ['payments_method_check', inList('method', METHODS)],
    ['payments_amount_positive', 'amount_minor > 0'],
    ['payments_currency_check', isoCurrency('currency')],
    ['payments_crypto_currency_check', `crypto_currency is null or ${inList('crypto_currency', CRYPTO_CURRENCIES)}`],
  ],
  payment_line_items: [
    ['payment_line_items_price_positive', 'unit_price_minor > 0'],
    ['payment_line_items_currency_check', isoCurrency('currency')],
  ],
  quotes: [
    ['quotes_amount_positive', 'amount_minor > 0'],
    ['quotes_currency_check', isoCurrency('currency')],
  ],
}

export async function up(knex: Knex): Promise<void> {
  const problems: string[] = []
  for (const [table, guards] of Object.entries(GUARDS)) {
    for (const [constraint, predicate] of guards) {
      const row = (await knex(table).whereRaw(`not (${predicate})`).count({ n: '*' }).first()) as { n: number | string } | undefined
      const n = Number(row?.n ?? 0)
      if (n > 0) problems.push(`${table}: ${n} row(s) break ${constraint} (${predicate.length > 80 ? `${predicate.slice(0, 77)}...` : predicate})`)
    }
  }
  if (problems.length > 0) throw new Error(`cannot add the payments database guards; fix these rows first: ${problems.join('; ')}`)

  for (const [table, guards] of Object.entries(GUARDS)) {
    await knex.schema.alterTable(table, (t) => {
      for (const [constraint, predicate] of guards) t.check(predicate, [], constraint)
    })
  }

  await knex.schema.createTable('payment_retries', (t) => {
    t.uuid('payment_id').notNullable().references('id').inTable('payments').onDelete('CASCADE')
    // expiry | reconciliation
    t.string('job', 32).notNullable()
    t.integer('attempts').notNullable()
    timestamp(t, 'retry_at').notNullable()
    t.text('last_error')
    timestamp(t, 'updated_at').notNullable()
    t.primary(['payment_id', 'job'])
    t.check('attempts > 0', [], 'payment_retries_attempts_positive')
  })

  await knex.schema.alterTable('provider_events', (t) => {
    t.index(['processed_at'], 'provider_events_processed_at_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('provider_events', (t) => {
    t.dropIndex(['processed_at'], 'provider_events_processed_at_idx')
  })
  await knex.schema.dropTableIfExists('payment_retries')
  // One constraint per statement: knex rebuilds the table on SQLite for each.
  for (const [table, guards] of Object.entries(GUARDS)) {
    for (const [constraint] of guards) {
      await knex.schema.alterTable(table, (t) => {
        t.dropChecks(constraint)
      })
    }
  }
}
