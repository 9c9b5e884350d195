/**
 * Placement on the host fleet (src/hosts/placement.ts) on both databases: a ready host of the
 * region with room, spread then pack, ports per host, idempotent by host key, a migration's new
 * placement never on the node's old host, nothing written when there is no room, reservations
 * freed, placements from three processes at once never overbooking a host, and a node being
 * moved configured for the host it runs on, not the one reserved for its next move.
 */
import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { DEFAULT_INSTANCE_TYPES } from '../../../src/hosts/instance-types.js'
import { HOST_RPC_PORTS, placeNode, releaseReservation, reservationOnHost, usageByHost, type Placement } from '../../../src/hosts/placement.js'
import { moveHost } from '../../../src/hosts/service.js'
import { rpcHostOf } from '../../../src/provisioning/configure.js'
import { insertHost, updateHostState, type HostCapacity, type Host } from '../../../src/hosts/store.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'

const run = promisify(execFile)

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'place-worker.ts')

async function placeInChild(url: string, nodeIds: string[]): Promise<Array<string | null>> {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', WORKER, url, ...nodeIds], { timeout: 50_000 })
  return JSON.parse(stdout) as Array<string | null>
}

const GiB = 2 ** 30
const SMALL = DEFAULT_INSTANCE_TYPES['ssh.small'] as HostCapacity
/** Room for exactly three ssh.small nodes (cpu is the tight one). */
const THREE_SMALL: HostCapacity = { cpu: 3, memory_bytes: 64 * GiB, disk_bytes: 1024 * GiB }

describe.each(DIALECTS)('placement on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
  })
  afterEach(async () => t.destroy())

  let hostCount = 0
  async function host(name: string, options: { region?: string; capacity?: HostCapacity; state?: Host['state'] } = {}): Promise<Host> {
    hostCount += 1
    const added = await insertHost(db, {
      id: crypto.randomUUID(),
      name,
      address: `10.0.0.${hostCount}`,
      port: 22,
      user: 'root',
      region: options.region ?? 'eu-1',
      rootDir: '/var/lib/nodeplane',
      capacity: options.capacity ?? THREE_SMALL,
      labels: {},
      hostKeyFingerprint: `SHA256:${'A'.repeat(43)}`,
      now: new Date(),
    })
    if (options.state && options.state !== 'ready') await updateHostState(db, added, options.state, new Date())
    return added
  }

  async function node(userId?: string, chain = 'ethereum-anvil'): Promise<{ id: string; userId: string }> {
    const owner = userId ?? (await insertUser(db))
    const subscriptionId = await insertSubscriptionOf(db, owner, { chain, instanceType: 'ssh.small' })
    const created = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: chain, node_type: 'full', provider: 'ssh', region: 'eu-1', instance_type: 'ssh.small' })
    return { id: created.id, userId: owner }
  }

  const place = (nodeId: string, hostKey: string = nodeId, region = 'eu-1'): Promise<Placement | undefined> =>
    placeNode(db, { hostKey, nodeId, region, instanceType: 'ssh.small', needs: SMALL })

  const reservations = async () => Number(((await db('host_reservations').count({ n: '*' }).first()) as { n: number | string }).n)

  it('places a node on a ready host of its region with room, and reserves its needs and a port there', async () => {
    await host('other-region', { region: 'us-1' })
    await host('cordoned', { state: 'cordoned' })
    await host('unreachable', { state: 'unreachable' })
    await host('too-small', { capacity: { cpu: 8, memory_bytes: GiB, disk_bytes: 1024 * GiB } })
    const fit = await host('fit')
    const { id } = await node()

    const placed = await place(id)
    expect(placed?.host.name).toBe('fit')
    expect(placed?.reservation).toMatchObject({ host_id: fit.id, node_id: id, cpu: SMALL.cpu, memory_bytes: SMALL.memory_bytes, disk_bytes: SMALL.disk_bytes, rpc_port: HOST_RPC_PORTS.first })
    expect((await usageByHost(db, [fit.id])).get(fit.id)).toEqual({ cpu: 1, memory_bytes: SMALL.memory_bytes, disk_bytes: SMALL.disk_bytes, nodes: 1 })
  })

  it("spreads one user's nodes of a chain across hosts, then packs: other nodes go to the fullest host that has room", async () => {
    const a = await host('a')
    const b = await host('b')
    const owner = await insertUser(db)
    const first = await place((await node(owner)).id)
    const second = await place((await node(owner)).id)
    expect(new Set([first?.host.id, second?.host.id])).toEqual(new Set([a.id, b.id]))

    // Both hosts hold one node now; a third node of the same user and chain goes to either, and
    // makes that host the fullest: other users' nodes then fill it before the emptier one.
    const third = await place((await node(owner)).id)
    const fuller = third?.host.id as string
    const strangers = [await place((await node()).id), await place((await node()).id)]
    expect(strangers.map((p) => p?.host.id)).toEqual([fuller, fuller === a.id ? b.id : a.id])
    expect((await usageByHost(db, [a.id, b.id])).get(fuller)?.nodes).toBe(3)
  })

  it('gives each node on a host its own port, and a freed port to the next node', async () => {
    await host('only')
    const nodes = [await node(), await node(), await node()]
    const placed = [await place(nodes[0]!.id), await place(nodes[1]!.id), await place(nodes[2]!.id)]
    expect(placed.map((p) => p?.reservation.rpc_port)).toEqual([10_000, 10_001, 10_002])
    expect(await releaseReservation(db, nodes[1]!.id)).toBe(true)
    expect(await releaseReservation(db, nodes[1]!.id)).toBe(false)
    const next = await place((await node()).id)
    expect(next?.reservation.rpc_port).toBe(10_001)
  })

  it('is idempotent by host key: placing again returns the same placement and reserves nothing more', async () => {
    await host('a')
    await host('b')
    const { id } = await node()
    const first = await place(id, `${id}-k`)
    const again = await place(id, `${id}-k`)
    expect(again?.reservation).toEqual(first?.reservation)
    expect(await reservations()).toBe(1)
  })

  it("places a migrating node's new host key on another host than its old one, or nowhere", async () => {
    const a = await host('a')
    const { id } = await node()
    const old = await place(id, `${id}`)
    expect(old?.host.id).toBe(a.id)
    // Only the old host has room: no placement, nothing written.
    expect(await place(id, `${id}-m1`)).toBeUndefined()
    expect(await reservations()).toBe(1)
    const b = await host('b')
    const moved = await place(id, `${id}-m1`)
    expect(moved?.host.id).toBe(b.id)
    expect((await reservationOnHost(db, id, `${b.id}/${id}-m1`))?.host_key).toBe(`${id}-m1`)
    expect((await reservationOnHost(db, id, `${a.id}/${id}`))?.host_key).toBe(id)
  })

  it('a node being moved listens on the host it runs on until it moved, though its next host is reserved (a rollout reconfiguring it meanwhile)', async () => {
    const a = await host('a')
    const b = await host('b')
    const { id } = await node()
    expect((await place(id))?.host.id).toBe(a.id)
    await db('nodes').where({ id }).update({ host_id: `${a.id}/${id}` })
    // A drain reserved its room on b (newer than its placement on a) before the migration moved it.
    expect((await place(id, `${id}-m1`))?.host.id).toBe(b.id)
    expect(await rpcHostOf(db, id)).toBe(a.address)
    // The migration configures the new host with that host's address.
    expect(await rpcHostOf(db, id, `${b.id}/${id}-m1`)).toBe(b.address)
    await db('nodes').where({ id }).update({ host_id: `${b.id}/${id}-m1` })
    expect(await rpcHostOf(db, id)).toBe(b.address)
    // Off the fleet (no placement on its host): loopback.
    await db('nodes').where({ id }).update({ host_id: 'local-1' })
    expect(await rpcHostOf(db, id)).toBe('127.0.0.1')
  })

  it('returns nothing and writes nothing when no ready host of the region has room; freeing a reservation makes room', async () => {
    await host('a', { capacity: { cpu: 1, memory_bytes: 4 * GiB, disk_bytes: 100 * GiB } })
    const first = await node()
    expect(await place(first.id)).toBeDefined()
    const second = await node()
    expect(await place(second.id)).toBeUndefined()
    expect(await place(second.id, second.id, 'nowhere')).toBeUndefined()
    expect(await reservations()).toBe(1)
    await releaseReservation(db, first.id)
    expect((await place(second.id))?.host.name).toBe('a')
  })

  it('counts a placed node as on its host before the node records it: remove is refused, drain keeps it draining', async () => {
    const a = await host('a')
    const { id } = await node()
    await place(id)
    await expect(moveHost({ db }, a.name, 'remove')).rejects.toThrow(/has 1 node/)
    expect((await moveHost({ db }, a.name, 'drain')).state).toBe('draining')
  })

  it('never overbooks a host: placements from three processes at once fill the fleet exactly', async () => {
    const hosts = [await host('a'), await host('b')]
    const nodes = await Promise.all(Array.from({ length: 12 }, () => node()))
    const ids = nodes.map((n) => n.id)
    // This process places four at once, and two other processes four each, all at the same time.
    const [own, ...others] = await Promise.all([
      Promise.all(ids.slice(0, 4).map((id) => place(id))),
      placeInChild(t.url, ids.slice(4, 8)),
      placeInChild(t.url, ids.slice(8)),
    ])
    const placed = [...own.map((p) => p?.host.id ?? null), ...others.flat()]
    expect(placed.filter(Boolean)).toHaveLength(6)
    const usage = await usageByHost(
      db,
      hosts.map((h) => h.id),
    )
    for (const h of hosts) {
      expect(usage.get(h.id)?.cpu).toBe(3)
      const ports = (await db('host_reservations').where({ host_id: h.id }).pluck('rpc_port')).map(Number).sort()
      expect(ports).toEqual([10_000, 10_001, 10_002])
    }
    expect(await reservations()).toBe(6)
  }, 60_000)
})
