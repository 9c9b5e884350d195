/**
 * Rollouts (issue 8): what an operator watching a rollout needs beyond the spec's columns —
 * why it is paused, what it waits for (a canary approval), the batch it is at, whether a
 * threshold was overridden (`force`) — and the same pause reason on groups.
 */
import type { Knex } from 'knex'

export const name = '0009_rollouts'

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('rollouts', (t) => {
    // operator | failure_threshold | canary_failed | rollback (spec: full rollback pauses first)
    t.string('pause_reason', 32)
    // approve_canary while a breaking migration's canary waits for the operator
    t.string('awaiting', 32)
    t.integer('current_batch')
    t.integer('batch_count')
    t.boolean('forced').notNullable().defaultTo(false)
    t.text('error_message')
  })
  await knex.schema.alterTable('rollout_groups', (t) => {
    t.string('pause_reason', 32)
    t.text('error_message')
  })
  await knex.schema.alterTable('rollout_nodes', (t) => {
    t.index(['node_id', 'status'], 'rollout_nodes_node_status_idx')
  })
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('rollout_nodes', (t) => {
    t.dropIndex(['node_id', 'status'], 'rollout_nodes_node_status_idx')
  })
  await knex.schema.alterTable('rollout_groups', (t) => {
    t.dropColumn('pause_reason')
    t.dropColumn('error_message')
  })
  await knex.schema.alterTable('rollouts', (t) => {
    for (const column of ['pause_reason', 'awaiting', 'current_batch', 'batch_count', 'forced', 'error_message']) t.dropColumn(column)
  })
}
