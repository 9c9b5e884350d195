/**
 * A group component's source version is what its own node type runs: a group of the chain's
 * binary for full nodes, then for archive nodes, must find the archive nodes' version for the
 * second component (it looked at the group's node type, found nothing left to upgrade and
 * passed the archive nodes over).
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { writeConfigState } from '../../../src/provisioning/configure.js'
import { currentVersion } from '../../../src/rollouts/group-workflow.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser } from '../../helpers/fixtures.js'

describe.each(DIALECTS)('group component source version on %s', (dialect) => {
  let t: TestDatabase | undefined
  afterEach(async () => {
    await t?.destroy()
    t = undefined
  })

  async function node(db: Db, nodeType: string, version: string): Promise<void> {
    const subscription = await insertSubscription(db, await insertUser(db))
    const n = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: nodeType, provider: 'local', region: 'local', instance_type: 'local.small' })
    await db('nodes').where({ id: n.id }).update({ state: 'healthy' })
    await writeConfigState(db, n.id, version, null)
  }

  it('is the version most nodes of the component\'s node type run, other than the target', async () => {
    t = await createTestDatabase(dialect)
    const { db } = t
    // The full nodes are done (component 0); the archive nodes still run 1.0.0.
    await node(db, 'full', '1.1.0')
    await node(db, 'full', '1.1.0')
    await node(db, 'archive', '1.0.0')
    await node(db, 'archive', '1.0.0')
    await node(db, 'archive', '1.1.0')

    expect(await currentVersion(db, 'devnet', 'full', '1.1.0')).toBeNull()
    expect(await currentVersion(db, 'devnet', 'archive', '1.1.0')).toBe('1.0.0')
    expect(await currentVersion(db, 'devnet', 'archive', '1.0.0')).toBe('1.1.0')
  })
})
