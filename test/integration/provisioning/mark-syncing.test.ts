/**
 * The provision workflow's `mark-syncing` step against the agent's first sync reports.
 *
 * Postgres only: there a health write committed between the step's read of the node and its
 * update failed the optimistic version check, and with a fleet starting at once the retries ran
 * out ("node … was changed concurrently"). SQLite cannot interleave so: a write transaction takes
 * the database's write lock at BEGIN (BEGIN IMMEDIATE, src/db/knex.ts), so no other writer can
 * commit between the step's read and its write.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { applyHealthUpdate } from '../../../src/nodes/health-state-machine.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { markProvisionedSyncing } from '../../../src/provisioning/provision.js'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { waitFor } from '../../helpers/ports.js'

describe('mark-syncing beside a concurrent health write (postgres)', () => {
  let t: TestDatabase
  let db: Db
  let reporter: Db

  beforeAll(async () => {
    t = await createTestDatabase('postgres')
    db = t.db
    reporter = t.connect()
  })
  afterAll(async () => {
    await reporter.destroy()
    await t.destroy()
  })

  it('waits for a sync report being written and then lands, instead of failing the version check', async () => {
    const node = await insertTestNode(db)
    expect(node.state).toBe('provisioning')

    // The agent's first sync event, being written and not committed yet.
    const report = await reporter.transaction()
    await applyHealthUpdate(report, { nodeId: node.id, change: { writer: 'sync_event', sync_status: 'syncing' }, reason: 'first report', now: new Date() })

    const marking = markProvisionedSyncing(db, node.id, new Date())
    const outcome = marking.then(
      () => 'landed',
      (err: unknown) => `failed: ${String(err)}`,
    )
    // The step is now waiting on the report's row lock (before the fix it had read version 1 first).
    await waitFor(
      async () => {
        const rows = (await reporter.raw(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)) as { rows: Array<{ n: number }> }
        return rows.rows[0]!.n > 0
      },
      'mark-syncing to wait on the node row',
      10_000,
      20,
    )
    await report.commit()

    expect(await outcome).toBe('landed')
    const after = await findNode(db, node.id)
    expect(after?.state).toBe('syncing')
    expect(after?.sync_status).toBe('syncing')
    expect(after?.version).toBe(3)
  })
})
