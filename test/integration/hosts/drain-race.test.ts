/**
 * Two operators (or a retried request) draining the same host at the same moment: one drain runs,
 * both calls answer the draining host. On Postgres both transactions used to find no running
 * drain, and the second insert broke the one-running-drain index: a 500.
 */
import crypto from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { moveHost } from '../../../src/hosts/service.js'
import { insertHost } from '../../../src/hosts/store.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser, setNodeState } from '../../helpers/fixtures.js'

const CAPACITY = { cpu: 8, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 }

describe.each(DIALECTS)('concurrent host drains on %s', (dialect) => {
  let t: TestDatabase
  let db: Db

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => {
    await t?.destroy()
  })

  it('start one drain between them, and both answer the draining host', async () => {
    for (let round = 0; round < 5; round++) {
      const host = await insertHost(db, { id: crypto.randomUUID(), name: `race-${round}`, address: `10.213.251.${round + 1}`, port: 22, user: 'root', region: 'test-1', rootDir: '/srv/np', capacity: CAPACITY, labels: {}, hostKeyFingerprint: `SHA256:${'A'.repeat(43)}`, now: new Date() })
      const user = await insertUser(db)
      const node = await insertNode(db, { subscription_id: await insertSubscription(db, user), chain_profile_id: 'devnet', node_type: 'full', provider: 'ssh', region: 'test-1', instance_type: 'ssh.small' })
      await setNodeState(db, node.id, 'healthy')
      await db('nodes').where({ id: node.id }).update({ host_id: `${host.id}/${node.id}` })

      const answers = await Promise.allSettled([moveHost({ db }, host.name, 'drain'), moveHost({ db }, host.name, 'drain')])
      expect(answers.map((a) => (a.status === 'fulfilled' ? a.value.state : `refused: ${String(a.reason)}`))).toEqual(['draining', 'draining'])
      const drains = await db('host_drains').where({ host_id: host.id })
      expect(drains).toHaveLength(1)
    }
  })
})
