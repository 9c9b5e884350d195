/**
 * Column shapes shared by both databases' migrations. Migrations are history: once released,
 * a change here must go into a new migration, never into these helpers.
 */
import type { Knex } from 'knex'

/** UTC timestamp: timestamptz on Postgres; epoch milliseconds on SQLite. */
export function timestamp(t: Knex.CreateTableBuilder, name: string): Knex.ColumnBuilder {
  return t.timestamp(name, { useTz: true })
}

export function timestamps(t: Knex.CreateTableBuilder): void {
  timestamp(t, 'created_at').notNullable()
  timestamp(t, 'updated_at').notNullable()
}

/** A unique index over rows matching `where` (portable partial index: SQLite >= 3.8, Postgres). */
export async function partialUnique(knex: Knex, name: string, table: string, columns: string[], where: string): Promise<void> {
  await knex.raw(`CREATE UNIQUE INDEX ${name} ON ${table} (${columns.join(', ')}) WHERE ${where}`)
}

export async function partialIndex(knex: Knex, name: string, table: string, columns: string[], where: string): Promise<void> {
  await knex.raw(`CREATE INDEX ${name} ON ${table} (${columns.join(', ')}) WHERE ${where}`)
}
