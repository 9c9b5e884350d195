/**
 * `host drain` on a fleet of two network-namespace hosts (docs/infrastructure.md, "Drain"), on both
 * databases at once (each its own control plane, ports and node directories on the same two hosts),
 * through the hosts API of a real api-server, with real agents running devnet chains:
 *
 * - a host with two nodes drains onto the other: both migrate one at a time and are healthy there
 *   with their subscriptions, the drained host is cordoned with no reservation, nothing of the
 *   nodes left on it, and `GET /hosts/{host}` shows the progress and then the nodes on their new
 *   host (instance type, RPC port, state) with used and free capacity;
 * - draining with nowhere to go stops at once with the reason, the host stays draining, the nodes
 *   keep running where they are and nothing is reserved elsewhere; the operator is notified; once
 *   a host has room, draining again continues and empties it;
 * - uncordon stops a drain that waits on a node that cannot move (provisioning);
 * - bad input: an unknown host 404, a removed host 409, a malformed one 400, no key 401, a
 *   non-admin key 403, each `{error, details}`, and no drain recorded or started.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { defaultConfigDir, loadChainCatalogue, type ChainCatalogue } from '../../../src/config/chains.js'
import { fromJson } from '../../../src/db/dialect.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import type { HostDetail } from '../../../src/hosts/service.js'
import { healthEventSubject } from '../../../src/nodes/health-state-machine.js'
import { findNode, insertNode, type NodeRecord } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import { HOST_DRAIN_WORKFLOW } from '../../../src/provisioning/workflow-names.js'
import { listRuns } from '../../../src/workflows/index.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { insertSubscriptionOf, insertUser } from '../../helpers/fixtures.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { waitFor } from '../../helpers/ports.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources } from '../http/harness.js'
import { untilRunFinished, withDevnetBlockTime } from '../provisioning/harness.js'
import { prepareFleet, processesOf, type FleetFiles } from './fleet-harness.js'
import { onTheFleet, startFleetStack, type FleetStack } from './fleet-stack.js'

const INSTANCE_TYPE = 'test.devnet'
const NEEDS = { cpu: 1, memory_bytes: 2 ** 30, disk_bytes: 2 ** 30 }
/** Room for two nodes on each host. */
const CAPACITY = { cpu: 2, memory_bytes: 4 * 2 ** 30, disk_bytes: 4 * 2 ** 30 }

let hosts: NetnsHost[] = []
let files: FleetFiles
let catalogue: ChainCatalogue

beforeAll(async () => {
  hosts = [await startNetnsHost(), await startNetnsHost()]
  files = await prepareFleet(hosts, (hosts[0] as NetnsHost).gatewayAddress)
  catalogue = onTheFleet(withDevnetBlockTime(await loadChainCatalogue(defaultConfigDir()), 100), 'devnet', INSTANCE_TYPE)
}, 120_000)
afterAll(async () => {
  for (const host of hosts) await host.stop()
})

describeEachDialectConcurrently('host drain on a fleet of namespace hosts, on %s', (dialect) => {
  const resources = new Resources()
  let stack: FleetStack
  let url: string
  let admin: { id: string; key: string }
  let user: string
  const nodes: NodeRecord[] = []

  beforeAll(async () => {
    stack = await startFleetStack({
      dialect,
      hosts: [
        { name: 'host-a', netns: hosts[0] as NetnsHost, capacity: CAPACITY },
        { name: 'host-b', netns: hosts[1] as NetnsHost, capacity: CAPACITY },
      ],
      files,
      catalogue,
      instanceTypes: { [INSTANCE_TYPE]: NEEDS },
      rpcPorts: dialect === 'sqlite' ? { first: 22_000, last: 22_049 } : { first: 22_050, last: 22_099 },
      // A live node's migration waits the fence timeout after its old agent was replaced: short here.
      fenceTimeoutMs: 3_000,
      heartbeatTimeoutMs: 60_000,
      migrationGraceMs: 60_000,
      evaluationIntervalMs: 1_000,
    })
    resources.add(() => stack.stop())
    const { authenticate } = authenticatorFromSettings({ AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000 }, { db: stack.db })
    url = (await resources.api({ db: stack.db, authenticate, routes: controlPlaneRoutes({ db: stack.db }) })).url
    const adminUser = await newUser(stack.db, { admin: true })
    admin = { id: adminUser.id, key: (await newKey(stack.db, adminUser.id, { scopes: ['*', 'admin'], admin: true })).key }
    user = (await newKey(stack.db, (await newUser(stack.db)).id, { scopes: ['*'] })).key
  }, 120_000)
  afterAll(() => resources.cleanup(), 120_000)

  const call = (method: string, route: string, key: string | null = admin.key) => getJson(`${url}/api/v1${route}`, { method, headers: key ? { 'x-api-key': key } : {} })
  const show = async (host: string) => {
    const res = await call('GET', `/hosts/${host}`)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    return res.body as HostDetail
  }
  const untilDrain = (host: string, status: string, timeoutMs = 150_000) =>
    waitFor(async () => {
      const detail = await show(host)
      return detail.drain?.status === status && detail
    }, `the drain of ${host} to be ${status}`, timeoutMs, 250)
  /** Healthy, or an error that says where the node is stuck and what its agent logged last. */
  const untilHealthy = (nodeId: string) =>
    stack.untilHealthy(nodeId).catch(async (err: unknown) => {
      const node = (await findNode(stack.db, nodeId)) as NodeRecord
      const log = path.join(stack.whereIs(node).dir, 'agent.log')
      const tail = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').slice(-2_000) : '(no agent.log)'
      // What the gateway last heard (agent_status) beside what it wrote (sync events, incidents such as sync_flapping).
      const heard = await stack.db('agent_status').where({ node_id: nodeId }).first('sync_status', 'process_state', 'reported_at', 'binary_version')
      const syncEvents = ((await stack.db('outbox').where({ subject: healthEventSubject(nodeId) }).orderBy('id').select('payload')) as Array<{ payload: unknown }>)
        .map((r) => fromJson<{ dimension: string; to: string }>(r.payload))
        .map((e) => `${e.dimension}=${e.to}`)
      const incidents = await stack.db('incidents').where({ node_id: nodeId }).select('category', 'status', 'title')
      throw new Error(
        `${(err as Error).message}: state ${node.state}, sync ${node.sync_status}, on ${node.host_id}; agent_status ${JSON.stringify(heard)}; health events ${syncEvents.join(' ')}; incidents ${JSON.stringify(incidents)}; agent.log ends:\n${tail}`,
      )
    })
  const processesLeftOn = (netns: NetnsHost, ids: readonly string[]) => ids.filter((id) => processesOf(netns, id).length > 0)
  const notificationsOf = async (kind: string) => (await stack.db('notifications').where({ user_id: admin.id, kind }).select('title', 'body', 'data')) as Array<{ title: string; body: string }>

  it('drains a host with two nodes onto the other: both healthy there with their subscriptions, the drained host cordoned with no reservation', async () => {
    // Both nodes onto host-a: host-b takes none while cordoned.
    expect((await call('POST', '/hosts/host-b/cordon')).status).toBe(200)
    for (let i = 0; i < 2; i++) nodes.push(await stack.newNode('devnet'))
    const runs = await Promise.all(nodes.map(async (n) => untilRunFinished(stack.db, (await requestProvision(stack.db, n.id)).run.id, 120_000)))
    for (const r of runs) expect(r.status, JSON.stringify(r.error)).toBe('completed')
    for (const n of nodes) expect(stack.whereIs(await stack.untilHealthy(n.id)).name).toBe('host-a')
    const before = await show('host-a')
    expect(before.reservations.map((r) => r.node_id).sort()).toEqual(nodes.map((n) => n.id).sort())
    expect(before.reservations[0]).toMatchObject({ instance_type: INSTANCE_TYPE, rpc_port: expect.any(Number), node_state: 'healthy', cpu: 1 })
    expect(before.used).toMatchObject({ cpu: 2, nodes: 2 })
    expect(before.free.cpu).toBe(0)
    expect(before.drain).toBeNull()
    expect((await call('POST', '/hosts/host-b/uncordon')).status).toBe(200)

    const started = await call('POST', '/hosts/host-a/drain')
    expect(started.status, JSON.stringify(started.body)).toBe(200)
    expect(started.body).toMatchObject({ state: 'draining', drain: { status: 'running', nodes_left: 2, nodes_moved: 0, requested_by: admin.id } })
    // Draining again while it runs changes nothing.
    expect((await call('POST', '/hosts/host-a/drain')).body).toMatchObject({ drain: { id: (started.body as HostDetail).drain?.id } })

    const drained = await untilDrain('host-a', 'completed')
    expect(drained).toMatchObject({ state: 'cordoned', reservations: [], used: { cpu: 0, nodes: 0 }, free: CAPACITY, drain: { nodes_moved: 2, nodes_left: 0, stop_reason: null } })
    for (const n of nodes) {
      const moved = await untilHealthy(n.id)
      expect(stack.whereIs(moved).name).toBe('host-b')
      expect(moved.subscription_id).toBe(n.subscription_id)
      expect((await stack.db('subscriptions').where({ id: n.subscription_id }).first('status')).status).toBe('active')
    }
    // Nothing of them runs on host-a any more.
    expect(processesLeftOn(hosts[0] as NetnsHost, nodes.map((n) => n.id))).toEqual([])
    const onB = await show('host-b')
    expect(onB.reservations.map((r) => r.node_id).sort()).toEqual(nodes.map((n) => n.id).sort())
    expect(onB.reservations.every((r) => r.node_state === 'healthy' && r.instance_type === INSTANCE_TYPE)).toBe(true)
    expect(new Set(onB.reservations.map((r) => r.rpc_port)).size).toBe(2)
    expect(onB.free.cpu).toBe(0)
    // One migration per node, each an operator's (forced) one.
    const migrations = await listRuns(stack.db, { name: 'migrate' })
    expect(migrations.map((m) => [m.status, (m.input as { forced: boolean }).forced])).toEqual([
      ['completed', true],
      ['completed', true],
    ])
    expect(await notificationsOf('host_drain_completed')).toEqual([expect.objectContaining({ title: 'Host host-a is drained' })])
  }, 300_000)

  it('with nowhere to go the drain stops with the reason and the host stays draining; once a host has room, draining again continues', async () => {
    const started = await call('POST', '/hosts/host-b/drain')
    expect(started.status).toBe(200)
    const stopped = await untilDrain('host-b', 'stopped', 30_000)
    expect(stopped.state).toBe('draining')
    expect(stopped.drain?.stop_reason).toMatch(/^no host with capacity in region test-1 for node [0-9a-f-]{36} \(instance type test\.devnet\)/)
    expect(nodes.map((n) => n.id)).toContain(stopped.drain?.stopped_at_node_id)
    // The nodes were not touched: still healthy on host-b, nothing reserved anywhere else, no migration.
    for (const n of nodes) expect(stack.whereIs((await findNode(stack.db, n.id)) as NodeRecord).name).toBe('host-b')
    expect(new Set(await stack.db('host_reservations').whereIn('node_id', nodes.map((n) => n.id)).pluck('host_id'))).toEqual(new Set([stopped.id]))
    expect((await show('host-a')).reservations).toEqual([])
    expect(await stack.db('workflow_runs').where({ workflow_name: 'migrate' }).whereNot({ status: 'completed' })).toEqual([])
    expect(await notificationsOf('host_drain_stopped')).toEqual([expect.objectContaining({ title: 'Drain of host host-b stopped', body: stopped.drain?.stop_reason })])
    for (const n of nodes) expect((await findNode(stack.db, n.id))?.state).toBe('healthy')

    // Room again: the next drain continues where this one stopped.
    expect((await call('POST', '/hosts/host-a/uncordon')).status).toBe(200)
    const again = await call('POST', '/hosts/host-b/drain')
    expect((again.body as HostDetail).drain).toMatchObject({ status: 'running', nodes_moved: 0 })
    expect((again.body as HostDetail).drain?.id).not.toBe(stopped.drain?.id)
    const drained = await untilDrain('host-b', 'completed')
    expect(drained).toMatchObject({ state: 'cordoned', reservations: [], drain: { nodes_moved: 2 } })
    for (const n of nodes) expect(stack.whereIs(await untilHealthy(n.id)).name).toBe('host-a')
    expect(processesLeftOn(hosts[1] as NetnsHost, nodes.map((n) => n.id))).toEqual([])
  }, 300_000)

  it('uncordon stops a drain that waits on a node that cannot move yet', async () => {
    const b = (await show('host-b')).id
    const owner = await insertUser(stack.db)
    const subscription = await insertSubscriptionOf(stack.db, owner, { chain: 'devnet', instanceType: INSTANCE_TYPE })
    // A node whose provisioning placed it on host-b and is still going: it cannot migrate.
    const placing = await insertNode(stack.db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'ssh', region: 'test-1', instance_type: INSTANCE_TYPE })
    await stack.db('nodes').where({ id: placing.id }).update({ host_id: `${b}/${placing.id}` })
    try {
      const started = await call('POST', '/hosts/host-b/drain')
      expect(started.body).toMatchObject({ state: 'draining', drain: { status: 'running', nodes_left: 1 } })
      const waiting = await waitFor(async () => {
        const d = await show('host-b')
        return d.drain?.activity?.includes('provisioning') && d
      }, 'the drain to wait on the provisioning node', 30_000, 100)
      expect(waiting.drain).toMatchObject({ current_node_id: placing.id, activity: `waiting: node ${placing.id} is provisioning` })

      const uncordoned = await call('POST', '/hosts/host-b/uncordon')
      expect(uncordoned.body).toMatchObject({ state: 'ready' })
      const run = await untilRunFinished(stack.db, (await stack.db('workflow_runs').where({ workflow_name: HOST_DRAIN_WORKFLOW, workflow_key: waiting.drain?.id }).first('id')).id, 30_000)
      expect(run).toMatchObject({ status: 'completed', result: { status: 'cancelled', nodes_moved: 0 } })
      expect(await show('host-b')).toMatchObject({ state: 'ready', drain: { status: 'cancelled', current_node_id: null } })
      expect((await findNode(stack.db, placing.id))?.state).toBe('provisioning')
    } finally {
      await stack.db('nodes').where({ id: placing.id }).update({ state: 'terminated' })
    }
  }, 60_000)

  it('refuses an unknown, removed or malformed host and a caller without the admin scope, with nothing recorded', async () => {
    const b = (await show('host-b')).id
    expect((await call('DELETE', '/hosts/host-b')).status).toBe(200)
    const drains = async () => Number(((await stack.db('host_drains').count({ n: '*' }).first()) as { n: number | string }).n)
    const runs = async () => Number(((await stack.db('workflow_runs').where({ workflow_name: HOST_DRAIN_WORKFLOW }).count({ n: '*' }).first()) as { n: number | string }).n)
    const [drainsBefore, runsBefore] = [await drains(), await runs()]
    const cases: Array<[string, string | null, number, RegExp]> = [
      ['/hosts/nope/drain', admin.key, 404, /no host nope/],
      [`/hosts/${b}/drain`, admin.key, 409, /drain applies to a host that is ready or cordoned or unreachable; host host-b is removed/],
      [`/hosts/${'x'.repeat(64)}/drain`, admin.key, 400, /.+/],
      ['/hosts/host-a/drain', null, 401, /.+/],
      ['/hosts/host-a/drain', user, 403, /admin/],
    ]
    for (const [route, key, status, details] of cases) {
      const res = await call('POST', route, key)
      expect(res.status, `${route}: ${JSON.stringify(res.body)}`).toBe(status)
      expect(res.body).toMatchObject({ error: expect.any(String), details: expect.stringMatching(details) })
    }
    expect((await call('GET', '/hosts/host-a', user)).status).toBe(403)
    expect(await drains()).toBe(drainsBefore)
    expect(await runs()).toBe(runsBefore)
    expect((await show('host-a')).state).toBe('ready')
  }, 60_000)
})
