/**
 * A host's consecutive failed probes (docs/infrastructure.md, "Health probe"): a `ready` host
 * becomes `unreachable` only after HOSTS_PROBE_FAILURES of them in a row, so one slow SSH
 * handshake does not take it out of placement. Existing hosts start at 0.
 */
import type { Knex } from 'knex'

export const name = '0023_host_probe_failures'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('hosts', (t) => {
    t.integer('probe_failures').notNullable().defaultTo(0)
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('hosts', (t) => {
    t.dropColumn('probe_failures')
  })
}
