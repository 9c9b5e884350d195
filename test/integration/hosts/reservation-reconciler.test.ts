/**
 * The host reservation reconciler (docs/infrastructure.md, "Reservations that outlive their
 * node"), on both databases: a placement whose node is terminated or failed, or which a live node
 * left behind (a migration's old host), is released; a live node's placement, a placement a
 * provision, migrate or terminate run still works with, a young one, and one on an unreachable
 * host are never touched; a host that cannot be cleaned up keeps its row for the next pass. The
 * clean-up is the real `ssh` provider's destroyHost: on a removed host it only releases the row,
 * and on a host whose SSH key is gone it fails (nothing reached) and the row stays.
 */
import crypto from 'node:crypto'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { insertHost, type Host } from '../../../src/hosts/store.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import { findStaleReservations, reconcileReservations, scheduleReservationReconciler } from '../../../src/hosts/reservation-reconciler.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { SshInfrastructureProvider } from '../../../src/provisioning/infrastructure/ssh.js'
import { migrationKey } from '../../../src/provisioning/workflow-names.js'
import { startWorkflow } from '../../../src/workflows/index.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription, insertUser, setNodeState } from '../../helpers/fixtures.js'
import { quiet } from './fleet-harness.js'

const HOUR = 3_600_000
const CAPACITY = { cpu: 8, memory_bytes: 8 * 2 ** 30, disk_bytes: 8 * 2 ** 30 }

describe.each(DIALECTS)('host reservation reconciler on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let pool: SshPool
  let provider: SshInfrastructureProvider
  const now = new Date()
  const old = new Date(now.getTime() - HOUR)

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    pool = createSshPool({ connectTimeoutMs: 500, execTimeoutMs: 1_000 })
    // No key is ever stored: a host not removed cannot be reached, as a host whose SSH fails.
    provider = new SshInfrastructureProvider({ db, pool, keys: fileSshKeyStore(tempDir('nodeplane-reconcile-keys-')), logger: quiet, instanceTypes: {}, placementWaitMs: 0, placementRetryIntervalMs: 1 })
  })
  afterEach(async () => {
    await pool?.close()
    await t?.destroy()
  })

  let hostCount = 0
  let port = 10_000
  async function host(state: Host['state']): Promise<Host> {
    hostCount += 1
    const h = await insertHost(db, { id: crypto.randomUUID(), name: `h${hostCount}`, address: `10.213.250.${hostCount}`, port: 22, user: 'root', region: 'test-1', rootDir: '/srv/np', capacity: CAPACITY, labels: {}, hostKeyFingerprint: `SHA256:${'A'.repeat(43)}`, now: old })
    if (state !== 'ready') await db('hosts').where({ id: h.id }).update({ state, ...(state === 'removed' ? { removed_at: old } : {}) })
    return { ...h, state }
  }

  /** A node in `state`, recorded on `recordedOn` (`<host id>/<host key>`), with placements under `keys`. */
  async function node(state: string, placements: Array<{ host: Host; key: string; at?: Date }>, recordedOn?: { host: Host; key: string }) {
    const user = await insertUser(db)
    const n = await insertNode(db, { subscription_id: await insertSubscription(db, user), chain_profile_id: 'devnet', node_type: 'full', provider: 'ssh', region: 'test-1', instance_type: 'ssh.small' }, old)
    await setNodeState(db, n.id, state)
    if (recordedOn) await db('nodes').where({ id: n.id }).update({ host_id: `${recordedOn.host.id}/${recordedOn.key}` })
    for (const p of placements) {
      await db('host_reservations').insert({ host_key: p.key, host_id: p.host.id, node_id: n.id, user_id: user, chain_profile_id: 'devnet', instance_type: 'ssh.small', cpu: 1, memory_bytes: 2 ** 30, disk_bytes: 2 ** 30, rpc_port: port++, created_at: p.at ?? old })
    }
    return n
  }

  const keysLeft = async () => ((await db('host_reservations').orderBy('host_key').pluck('host_key')) as string[]).sort()

  it('releases what terminated, failed and migrated-away nodes left; keeps every live placement, in-flight, young and unreachable one', async () => {
    const removed = await host('removed')
    const ready = await host('ready')
    const unreachable = await host('unreachable')

    await node('terminated', [{ host: removed, key: 'gone-terminated' }])
    await node('failed', [{ host: removed, key: 'gone-failed' }])
    // Migrated: runs on `ready` now; its old host's placement stayed (the old host was unreachable then).
    const moved = await node('healthy', [{ host: removed, key: 'moved-old' }, { host: ready, key: 'moved-new' }], { host: ready, key: 'moved-new' })
    const live = await node('healthy', [{ host: ready, key: 'live' }], { host: ready, key: 'live' })
    // Provisioning: placed, not recorded yet.
    await node('provisioning', [{ host: ready, key: 'placing' }])
    // Migrating: both placements are the migration's until it ends.
    const migrating = await node('maintenance', [{ host: removed, key: 'migrating-old' }, { host: ready, key: 'migrating-new' }], { host: removed, key: 'migrating-old' })
    await startWorkflow(db, 'migrate', { nodeId: migrating.id }, { key: migrationKey(migrating.id, old), now: old })
    // Failed, its terminate run still going: that run removes it.
    const terminating = await node('failed', [{ host: removed, key: 'terminating' }])
    await startWorkflow(db, 'terminate', { nodeId: terminating.id }, { key: terminating.id, now: old })
    // Young: a step may have placed it a moment ago.
    await node('terminated', [{ host: removed, key: 'young', at: new Date(now.getTime() - 1_000) }])
    // On an unreachable host nothing can be removed now.
    await node('terminated', [{ host: unreachable, key: 'cut-off' }])

    const stale = await findStaleReservations(db, { now, minAgeMs: 60_000 })
    expect(stale.map((s) => s.host_key).sort()).toEqual(['gone-failed', 'gone-terminated', 'moved-old'])
    expect(stale.find((s) => s.host_key === 'moved-old')?.reason).toMatch(/runs on .*moved-new; this placement was left behind/)

    const result = await reconcileReservations({ db, logger: quiet, destroy: (id) => provider.destroyHost(id), minAgeMs: 60_000 }, now)
    expect(result).toEqual({ released: expect.arrayContaining(['gone-failed', 'gone-terminated', 'moved-old']), failed: [] })
    expect(await keysLeft()).toEqual(['cut-off', 'live', 'migrating-new', 'migrating-old', 'moved-new', 'placing', 'terminating', 'young'])
    // The live nodes are untouched.
    expect((await db('nodes').where({ id: live.id }).first('host_id')).host_id).toBe(`${ready.id}/live`)
    expect((await db('nodes').where({ id: moved.id }).first('state')).state).toBe('healthy')
  })

  it('keeps a placement whose host cannot be cleaned up, and says why; a later pass after the host went away releases it', async () => {
    const ready = await host('ready')
    await node('terminated', [{ host: ready, key: 'stuck' }])
    const first = await reconcileReservations({ db, logger: quiet, destroy: (id) => provider.destroyHost(id), minAgeMs: 60_000 }, now)
    expect(first.released).toEqual([])
    expect(first.failed).toEqual([{ host_key: 'stuck', error: expect.stringMatching(/key|ENOENT|no such file/i) }])
    expect(await keysLeft()).toEqual(['stuck'])

    // The operator removed the host (nothing can run there any more): the row goes.
    await db('hosts').where({ id: ready.id }).update({ state: 'removed', removed_at: now })
    const second = await reconcileReservations({ db, logger: quiet, destroy: (id) => provider.destroyHost(id), minAgeMs: 60_000 }, now)
    expect(second).toEqual({ released: ['stuck'], failed: [] })
    expect(await keysLeft()).toEqual([])
  })

  it('runs as a periodic job under its lease', async () => {
    const removed = await host('removed')
    await node('terminated', [{ host: removed, key: 'periodic' }])
    const job = scheduleReservationReconciler({ db, logger: quiet, now: () => now }, { db, logger: quiet, destroy: (id) => provider.destroyHost(id), minAgeMs: 60_000 }, 3_600_000)
    try {
      expect(await job.tick()).toBe(true)
    } finally {
      await job.stop()
    }
    expect(await keysLeft()).toEqual([])
  })
})
