/**
 * Incidents (issue 7; docs/incidents.md). The `incidents` table exists since 0001; this adds
 * what the incident rules need beyond the spec's fields:
 * - `incident_occurrences`: one row per transition of a node into a category, kept for the
 *   flapping window. Flapping counts transitions across incidents (a blip that auto-resolved and
 *   came back is a new incident), so occurrence_count of one incident cannot answer it;
 * - who acknowledged / resolved an incident, and when a warning escalated to critical;
 * - the list order index (newest first).
 */
import type { Knex } from 'knex'
import { timestamp } from '../shared/columns.js'

export const name = '0007_incidents'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('incident_occurrences', (t) => {
    t.increments('id').primary()
    // No foreign key, like incidents themselves.
    t.uuid('node_id').notNullable()
    t.string('category', 32).notNullable()
    timestamp(t, 'occurred_at').notNullable()
    t.index(['node_id', 'category', 'occurred_at'], 'incident_occurrences_node_category_idx')
    t.index(['occurred_at'], 'incident_occurrences_occurred_at_idx')
  })
  await knex.schema.alterTable('incidents', (t) => {
    // A user id, or `auto` for auto-resolution.
    t.string('acknowledged_by', 64)
    t.string('resolved_by', 64)
    timestamp(t, 'escalated_at')
    t.index(['created_at', 'id'], 'incidents_created_at_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('incidents', (t) => {
    t.dropIndex(['created_at', 'id'], 'incidents_created_at_idx')
    t.dropColumn('escalated_at')
    t.dropColumn('resolved_by')
    t.dropColumn('acknowledged_by')
  })
  await knex.schema.dropTableIfExists('incident_occurrences')
}
