import { afterEach, describe, expect, it } from 'vitest'
import type { Db } from '../../../src/db/knex.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import type { ApplicationHealth, NodeState, SyncStatus } from '../../../src/nodes/states.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const NODE_KEYS = [
  'application_health',
  'binary_version',
  'chain_profile_id',
  'config_version',
  'created_at',
  'display_state',
  'endpoints',
  'id',
  'last_heartbeat',
  'last_migration_triggered_at',
  'node_type',
  'state',
  'subscription_id',
  'sync_status',
  'updated_at',
]
const HIDDEN = ['provider', 'instance_type', 'host_id', 'host_ip', 'region']
/** Values of the hidden columns on every test node; none may appear in any answer. */
const INTERNAL = { provider: 'secret-cloud', instance_type: 'm9.enormous', host_id: 'host-internal-4711', host_ip: '10.99.88.77', region: 'moon-south-1' }

const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000'

interface NodeBody {
  id: string
  subscription_id: string
  state: string
  display_state: string
  [key: string]: unknown
}
interface PageBody {
  items: NodeBody[]
  next_cursor: string | null
}

interface Dimensions {
  state?: NodeState
  sync_status?: SyncStatus
  application_health?: ApplicationHealth
}

/** A subscription of `userId` with one node, its dimensions set directly (test setup only). */
async function nodeOf(db: Db, userId: string, at: Date, dimensions: Dimensions = {}): Promise<{ id: string; subscriptionId: string }> {
  const subscriptionId = await insertSubscription(db, userId, at)
  const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full', ...INTERNAL }, at)
  await db('nodes')
    .where({ id: node.id })
    .update({ host_id: INTERNAL.host_id, host_ip: INTERNAL.host_ip, ...dimensions })
  return { id: node.id, subscriptionId }
}

async function setup(db: Db, api: AuthApi) {
  const alice = await newUser(db)
  const bob = await newUser(db)
  const root = await newUser(db, { admin: true })
  const at = api.clock.now()
  return {
    alice,
    bob,
    root,
    aliceKey: (await newKey(db, alice.id, { scopes: ['nodes:read'], now: at })).key,
    aliceNoScope: (await newKey(db, alice.id, { scopes: ['subscriptions:read', 'api-keys:manage'], now: at })).key,
    bobKey: (await newKey(db, bob.id, { scopes: ['*'], now: at })).key,
    adminKey: (await newKey(db, root.id, { scopes: ['*', 'admin'], admin: true, now: at })).key,
    // An admin user's key without the admin scope acts as that user only.
    rootUserKey: (await newKey(db, root.id, { scopes: ['nodes:read'], now: at })).key,
  }
}

const ids = (page: unknown) => (page as PageBody).items.map((n) => n.id)

describe.each(DIALECTS)('nodes API on %s', (dialect) => {
  it('refuses anonymous callers (401) and credentials without nodes:read (403)', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const node = await nodeOf(db, s.alice.id, api.clock.now())

    for (const path of ['/api/v1/nodes', `/api/v1/nodes/${node.id}`]) {
      const anonymous = await api.call('GET', path)
      expect(anonymous.status, path).toBe(401)
      expect(isErrorBody(anonymous.body)).toBe(true)
      const scopeless = await api.call('GET', path, { bearer: s.aliceNoScope })
      expect(scopeless.status, path).toBe(403)
      expect(isErrorBody(scopeless.body)).toBe(true)
      expect((scopeless.body as { details: string }).details).toContain('nodes:read')
      expect((await api.call('GET', path, { bearer: s.aliceKey })).status, path).toBe(200)
    }
  })

  it("shows a node to its owner and to an admin; another user's, unknown and malformed ids answer the same 404", async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const at = api.clock.now()
    const node = await nodeOf(db, s.alice.id, at, { state: 'healthy', sync_status: 'synced', application_health: 'ok' })
    const heartbeat = new Date(at.getTime() + 15_000)
    await db('nodes').where({ id: node.id }).update({ last_heartbeat: heartbeat })
    await db('node_config_state').insert({ node_id: node.id, binary_version: '1.1.0', config_version: 'cfg-7', updated_at: at })

    const own = await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.aliceKey })
    expect(own.status).toBe(200)
    expect(Object.keys(own.body as object).sort()).toEqual(NODE_KEYS)
    expect(own.body).toEqual({
      id: node.id,
      subscription_id: node.subscriptionId,
      chain_profile_id: 'devnet',
      node_type: 'full',
      state: 'healthy',
      sync_status: 'synced',
      application_health: 'ok',
      display_state: 'healthy',
      binary_version: '1.1.0',
      config_version: 'cfg-7',
      last_heartbeat: heartbeat.toISOString(),
      last_migration_triggered_at: null,
      created_at: at.toISOString(),
      updated_at: at.toISOString(),
      // The rpc-gateway's public URL: this server is configured with none, so the local default.
      endpoints: { http: `http://127.0.0.1:8545/v1/${node.id}`, ws: `ws://127.0.0.1:8545/v1/${node.id}` },
    })
    // Upper-case UUIDs name the same node on both databases.
    expect((await api.call('GET', `/api/v1/nodes/${node.id.toUpperCase()}`, { bearer: s.aliceKey })).status).toBe(200)

    const asAdmin = await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.adminKey })
    expect(asAdmin.status).toBe(200)
    expect(asAdmin.body).toEqual(own.body)

    const foreign = await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.bobKey })
    const unknown = await api.call('GET', `/api/v1/nodes/${UNKNOWN_ID}`, { bearer: s.aliceKey })
    const malformed = await api.call('GET', '/api/v1/nodes/not-a-uuid', { bearer: s.aliceKey })
    const notAdmin = await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.rootUserKey })
    for (const res of [foreign, unknown, malformed, notAdmin]) {
      expect(res.status).toBe(404)
      expect(isErrorBody(res.body)).toBe(true)
      expect(res.body).toEqual(foreign.body)
    }
    expect(JSON.stringify(foreign.body)).not.toContain(node.id)
  })

  it('never shows the internal fields, to users or admins', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const node = await nodeOf(db, s.alice.id, api.clock.now())
    const answers = [
      await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.aliceKey }),
      await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.adminKey }),
      await api.call('GET', '/api/v1/nodes', { bearer: s.aliceKey }),
      await api.call('GET', '/api/v1/nodes', { bearer: s.adminKey }),
      await api.call('GET', `/api/v1/nodes?user_id=${s.alice.id}`, { bearer: s.adminKey }),
    ]
    for (const res of answers) {
      expect(res.status).toBe(200)
      const nodes = 'items' in (res.body as object) ? (res.body as PageBody).items : [res.body as NodeBody]
      expect(nodes).toHaveLength(1)
      for (const n of nodes) {
        for (const field of HIDDEN) expect(n).not.toHaveProperty(field)
        expect(Object.keys(n).sort()).toEqual(NODE_KEYS)
      }
      const text = JSON.stringify(res.body)
      for (const value of Object.values(INTERNAL)) expect(text).not.toContain(value)
    }

    const doc = (await api.call('GET', '/api/v1/openapi.json')).body as {
      paths: Record<string, Record<string, { security?: unknown }>>
      components: { schemas: Record<string, { properties: Record<string, unknown> }> }
    }
    expect(doc.paths['/api/v1/nodes']?.get?.security).toEqual([{ bearerAuth: ['nodes:read'] }])
    expect(doc.paths['/api/v1/nodes/{id}']?.get?.security).toEqual([{ bearerAuth: ['nodes:read'] }])
    expect(Object.keys(doc.components.schemas.Node?.properties ?? {}).sort()).toEqual(NODE_KEYS)
  })

  it("lists the caller's nodes only; an admin lists all and may filter by user", async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const t0 = api.clock.ms
    const a1 = await nodeOf(db, s.alice.id, new Date(t0 + 1000))
    const b1 = await nodeOf(db, s.bob.id, new Date(t0 + 2000))
    const a2 = await nodeOf(db, s.alice.id, new Date(t0 + 3000))

    expect(ids((await api.call('GET', '/api/v1/nodes', { bearer: s.aliceKey })).body)).toEqual([a2.id, a1.id])
    expect(ids((await api.call('GET', '/api/v1/nodes', { bearer: s.bobKey })).body)).toEqual([b1.id])
    // An admin user's key without `admin` sees that user's own nodes: none.
    expect(ids((await api.call('GET', '/api/v1/nodes', { bearer: s.rootUserKey })).body)).toEqual([])
    expect(ids((await api.call('GET', '/api/v1/nodes', { bearer: s.adminKey })).body)).toEqual([a2.id, b1.id, a1.id])
    expect(ids((await api.call('GET', `/api/v1/nodes?user_id=${s.bob.id}`, { bearer: s.adminKey })).body)).toEqual([b1.id])
    expect(ids((await api.call('GET', `/api/v1/nodes?user_id=${UNKNOWN_ID}`, { bearer: s.adminKey })).body)).toEqual([])

    // A user may name themselves; naming someone else needs admin.
    expect(ids((await api.call('GET', `/api/v1/nodes?user_id=${s.alice.id}`, { bearer: s.aliceKey })).body)).toEqual([a2.id, a1.id])
    const other = await api.call('GET', `/api/v1/nodes?user_id=${s.bob.id}`, { bearer: s.aliceKey })
    expect(other.status).toBe(403)
    expect(isErrorBody(other.body)).toBe(true)
    expect((other.body as { details: string }).details).toContain('query.user_id')
  })

  it('filters by subscription and by state', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const t0 = api.clock.ms
    const healthy = await nodeOf(db, s.alice.id, new Date(t0 + 1000), { state: 'healthy', sync_status: 'synced', application_health: 'ok' })
    const down = await nodeOf(db, s.alice.id, new Date(t0 + 2000), { state: 'down' })
    const provisioning = await nodeOf(db, s.alice.id, new Date(t0 + 3000))
    const bobsHealthy = await nodeOf(db, s.bob.id, new Date(t0 + 4000), { state: 'healthy' })
    // A failed node and its replacement share a subscription.
    await db('nodes').where({ id: down.id }).update({ state: 'failed' })
    const replacement = (await insertNode(db, { subscription_id: down.subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date(t0 + 5000))).id

    const list = async (query: string, key = s.aliceKey) => {
      const res = await api.call('GET', `/api/v1/nodes?${query}`, { bearer: key })
      expect(res.status, query).toBe(200)
      return ids(res.body)
    }
    expect(await list('state=healthy')).toEqual([healthy.id])
    expect(await list('state=healthy', s.adminKey)).toEqual([bobsHealthy.id, healthy.id])
    expect(await list('state=provisioning')).toEqual([replacement, provisioning.id])
    expect(await list('state=failed')).toEqual([down.id])
    expect(await list('state=terminated')).toEqual([])
    expect(await list(`subscription_id=${down.subscriptionId}`)).toEqual([replacement, down.id])
    expect(await list(`subscription_id=${down.subscriptionId.toUpperCase()}`)).toEqual([replacement, down.id])
    expect(await list(`subscription_id=${down.subscriptionId}&state=failed`)).toEqual([down.id])
    // Another user's subscription is no error, just none of your nodes.
    expect(await list(`subscription_id=${bobsHealthy.subscriptionId}`)).toEqual([])
    expect(await list(`subscription_id=${bobsHealthy.subscriptionId}`, s.adminKey)).toEqual([bobsHealthy.id])
  })

  it('answers bad query parameters with 400 naming the parameter', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    await nodeOf(db, s.alice.id, api.clock.now())
    const cases: [string, string][] = [
      ['state=sleeping', 'query.state'],
      ['state=healthy&state=down', 'query.state'],
      ['subscription_id=nope', 'query.subscription_id: must be a subscription id (UUID)'],
      ['user_id=42', 'query.user_id'],
      ['limit=0', 'query.limit'],
      ['limit=201', 'query.limit: Number must be less than or equal to 200'],
      ['limit=ten', 'query.limit'],
      ['cursor=***', 'query.cursor'],
      ['cursor=bm90LWEtY3Vyc29y', 'query.cursor: must be a next_cursor value returned by this API'],
    ]
    for (const [query, details] of cases) {
      const res = await api.call('GET', `/api/v1/nodes?${query}`, { bearer: s.adminKey })
      expect(res.status, query).toBe(400)
      expect(isErrorBody(res.body), query).toBe(true)
      expect((res.body as { details: string }).details, query).toContain(details)
    }
    expect((await api.call('GET', '/api/v1/nodes?limit=200', { bearer: s.adminKey })).status).toBe(200)
  })

  it('pages newest first through every node exactly once, with a stable order for equal timestamps', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const t0 = api.clock.ms
    // Pairs share a created_at, so the id decides their order.
    const created: { id: string; at: number }[] = []
    for (let i = 0; i < 8; i++) {
      const at = t0 + Math.floor(i / 2) * 1000
      created.push({ id: (await nodeOf(db, s.alice.id, new Date(at))).id, at })
    }
    await nodeOf(db, s.bob.id, new Date(t0 + 500))
    const expected = [...created].sort((x, y) => y.at - x.at || (y.id < x.id ? -1 : 1)).map((n) => n.id)

    const seen: string[] = []
    const sizes: number[] = []
    let cursor: string | null = null
    for (let guard = 0; guard < 10; guard++) {
      const query: string = cursor ? `limit=3&cursor=${cursor}` : 'limit=3'
      const res = await api.call('GET', `/api/v1/nodes?${query}`, { bearer: s.aliceKey })
      expect(res.status).toBe(200)
      const page = res.body as PageBody
      seen.push(...page.items.map((n) => n.id))
      sizes.push(page.items.length)
      if (seen.length === 3) {
        // A node created while the client pages is newer than the cursor: never in a later page.
        await nodeOf(db, s.alice.id, new Date(t0 + 60_000))
      }
      cursor = page.next_cursor
      if (cursor === null) break
    }
    expect(sizes).toEqual([3, 3, 2])
    expect(seen).toEqual(expected)
  })

  it('pages 50 nodes by default', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    for (let i = 0; i < 51; i++) await nodeOf(db, s.alice.id, new Date(api.clock.ms + i))
    const first = (await api.call('GET', '/api/v1/nodes', { bearer: s.aliceKey })).body as PageBody
    expect(first.items).toHaveLength(50)
    expect(first.next_cursor).toEqual(expect.any(String))
    const rest = (await api.call('GET', `/api/v1/nodes?cursor=${first.next_cursor}`, { bearer: s.aliceKey })).body as PageBody
    expect(rest.items).toHaveLength(1)
    expect(rest.next_cursor).toBeNull()
    expect(new Set([...ids(first), ...ids(rest)]).size).toBe(51)
  })

  it('carries the display state: infrastructure first, then application health, then sync status', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const cases: [Dimensions, string][] = [
      [{ state: 'provisioning', sync_status: 'unknown', application_health: 'unknown' }, 'provisioning'],
      [{ state: 'syncing', sync_status: 'syncing', application_health: 'ok' }, 'syncing'],
      [{ state: 'healthy', sync_status: 'synced', application_health: 'ok' }, 'healthy'],
      [{ state: 'healthy', sync_status: 'synced', application_health: 'critical' }, 'critical'],
      [{ state: 'healthy', sync_status: 'stalled', application_health: 'ok' }, 'stalled'],
      [{ state: 'healthy', sync_status: 'stalled', application_health: 'degraded' }, 'degraded'],
      [{ state: 'down', sync_status: 'stalled', application_health: 'critical' }, 'down'],
      [{ state: 'maintenance', sync_status: 'syncing', application_health: 'ok' }, 'maintenance'],
      [{ state: 'failed', sync_status: 'unknown', application_health: 'unknown' }, 'failed'],
    ]
    const byId = new Map<string, string>()
    for (const [i, [dimensions, display]] of cases.entries()) {
      byId.set((await nodeOf(db, s.alice.id, new Date(api.clock.ms + i), dimensions)).id, display)
    }
    for (const [id, display] of byId) {
      const one = await api.call('GET', `/api/v1/nodes/${id}`, { bearer: s.aliceKey })
      expect((one.body as NodeBody).display_state).toBe(display)
    }
    const listed = (await api.call('GET', '/api/v1/nodes', { bearer: s.aliceKey })).body as PageBody
    expect(listed.items).toHaveLength(cases.length)
    for (const n of listed.items) expect(n.display_state).toBe(byId.get(n.id))
  })

  it('shows versions as null until node_config_state has them', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const s = await setup(db, api)
    const node = await nodeOf(db, s.alice.id, api.clock.now())
    const read = async () => (await api.call('GET', `/api/v1/nodes/${node.id}`, { bearer: s.aliceKey })).body as NodeBody
    expect(await read()).toMatchObject({ binary_version: null, config_version: null })
    await db('node_config_state').insert({ node_id: node.id, binary_version: '1.0.0', config_version: null, updated_at: api.clock.now() })
    expect(await read()).toMatchObject({ binary_version: '1.0.0', config_version: null })
    const listed = (await api.call('GET', '/api/v1/nodes', { bearer: s.aliceKey })).body as PageBody
    expect(listed.items[0]).toMatchObject({ id: node.id, binary_version: '1.0.0', config_version: null })
  })
})
