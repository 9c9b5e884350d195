/**
 * /api/v1/incidents over real HTTP with the api-server's authenticator, on both databases:
 * listing with filters and pages, owner-or-admin visibility (another user's incident is a 404
 * exactly like a missing one), scopes, bad input, the status moves of the spec's table and 409s.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import type { Db } from '../../../src/db/knex.js'
import { raiseIncident, type Incident } from '../../../src/health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS, incidentTitle, type IncidentCategory } from '../../../src/health/incident-rules.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { DIALECTS } from '../../helpers/db.js'
import { getJson, Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, TestClock } from '../auth/api-harness.js'
import { at, MINUTE, notificationsOf, ownedNode } from './helpers.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

interface PageBody {
  items: Incident[]
  next_cursor: string | null
}

async function startApi(db: Db) {
  const clock = new TestClock(at(60 * MINUTE).getTime())
  const { authenticate } = authenticatorFromSettings(
    {
      AUTH_PROVIDER: 'idp',
      AUTH_IDP_JWKS_URL: undefined,
      AUTH_IDP_ISSUER: undefined,
      AUTH_IDP_AUTHORIZED_PARTY: [],
      AUTH_CLOCK_SKEW: 30_000,
      AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json',
    },
    { db, now: clock.now, keySet: { cooldownMs: 0 } },
  )
  const limiter = createApiRateLimiter({ perMinute: 6000, now: () => clock.ms })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, routes: controlPlaneRoutes({ db, now: clock.now }) })
  const call = (method: string, path: string, key?: string) => getJson(`${api.url}${path}`, { method, headers: key === undefined ? {} : { authorization: `Bearer ${key}` } })
  return { clock, call, url: api.url }
}

async function raise(db: Db, node: { id: string; subscriptionId: string }, category: IncidentCategory, minute: number): Promise<Incident> {
  const raised = await db.transaction((trx) =>
    raiseIncident(
      trx,
      { nodeId: node.id, subscriptionId: node.subscriptionId, chainProfileId: 'devnet', category, occurredAt: at(minute * MINUTE), title: incidentTitle(category, 'devnet', node.id), description: 'test', metadata: { trigger: 'test' } },
      DEFAULT_INCIDENT_SETTINGS.flapping,
      at(minute * MINUTE),
    ),
  )
  return raised.incident
}

describe.each(DIALECTS)('incidents API on %s', (dialect) => {
  it("lists the caller's incidents newest first, page by page and filtered; an admin sees everyone's and may narrow to one user", async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const bob = await newUser(db)
    const admin = await newUser(db, { admin: true })
    const aliceKey = (await newKey(db, alice.id, { scopes: ['nodes:read'], now: api.clock.now() })).key
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true, now: api.clock.now() })).key
    const n1 = await ownedNode(db, 'down', {}, alice.id)
    const n2 = await ownedNode(db, 'healthy', {}, alice.id)
    const bobs = await ownedNode(db, 'down', {}, bob.id)
    const down = await raise(db, n1, 'node_down', 1)
    const stalled = await raise(db, n2, 'sync_stalled', 2)
    const degraded = await raise(db, n2, 'app_degraded', 3)
    const bobsDown = await raise(db, bobs, 'node_down', 4)

    const first = await api.call('GET', '/api/v1/incidents?limit=2', aliceKey)
    expect(first.status).toBe(200)
    const page1 = first.body as PageBody
    expect(page1.items.map((i) => i.id)).toEqual([degraded.id, stalled.id])
    expect(page1.items[0]).toEqual(degraded)
    const rest = (await api.call('GET', `/api/v1/incidents?limit=2&cursor=${page1.next_cursor}`, aliceKey)).body as PageBody
    expect(rest).toEqual({ items: [down], next_cursor: null })

    const ids = async (query: string, key = aliceKey) => ((await api.call('GET', `/api/v1/incidents?${query}`, key)).body as PageBody).items.map((i) => i.id)
    expect(await ids('severity=warning')).toEqual([degraded.id, stalled.id])
    expect(await ids('category=node_down')).toEqual([down.id])
    expect(await ids(`node_id=${n2.id}`)).toEqual([degraded.id, stalled.id])
    expect(await ids('status=acknowledged')).toEqual([])
    expect(await ids('status=open&severity=critical')).toEqual([down.id])

    expect(await ids('', adminKey)).toEqual([bobsDown.id, degraded.id, stalled.id, down.id])
    expect(await ids(`user_id=${bob.id}`, adminKey)).toEqual([bobsDown.id])
    const foreign = await api.call('GET', `/api/v1/incidents?user_id=${bob.id}`, aliceKey)
    expect(foreign.status).toBe(403)
    expect(isErrorBody(foreign.body)).toBe(true)
  })

  it('answers 400 with {error, details} for bad filters and cursors, 401 without a credential, 403 without nodes:read', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const key = (await newKey(db, alice.id, { scopes: ['nodes:read'], now: api.clock.now() })).key
    const paymentsOnly = (await newKey(db, alice.id, { scopes: ['payments:read'], now: api.clock.now() })).key
    for (const [query, field] of [
      ['status=closed', 'status'],
      ['severity=minor', 'severity'],
      ['category=disk_full', 'category'],
      ['node_id=not-a-uuid', 'node_id'],
      ['limit=0', 'limit'],
      ['cursor=!!', 'cursor'],
    ] as const) {
      const res = await api.call('GET', `/api/v1/incidents?${query}`, key)
      expect(res.status, query).toBe(400)
      expect(isErrorBody(res.body), query).toBe(true)
      expect((res.body as { details: string }).details, query).toContain(field)
    }
    expect((await api.call('GET', '/api/v1/incidents')).status).toBe(401)
    const forbidden = await api.call('GET', '/api/v1/incidents', paymentsOnly)
    expect(forbidden.status).toBe(403)
    expect(isErrorBody(forbidden.body)).toBe(true)
  })

  it("shows one incident; another user's, an unknown and a malformed id are the same 404", async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const bob = await newUser(db)
    const admin = await newUser(db, { admin: true })
    const aliceKey = (await newKey(db, alice.id, { scopes: ['nodes:read', 'nodes:write'], now: api.clock.now() })).key
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true, now: api.clock.now() })).key
    const mine = await raise(db, await ownedNode(db, 'down', {}, alice.id), 'node_down', 1)
    const bobs = await raise(db, await ownedNode(db, 'down', {}, bob.id), 'node_down', 1)

    const shown = await api.call('GET', `/api/v1/incidents/${mine.id}`, aliceKey)
    expect(shown).toMatchObject({ status: 200, body: mine })
    expect((await api.call('GET', `/api/v1/incidents/${bobs.id}`, adminKey)).status).toBe(200)

    const missing = await api.call('GET', '/api/v1/incidents/00000000-0000-4000-8000-000000000000', aliceKey)
    expect(missing.status).toBe(404)
    for (const [method, path] of [
      ['GET', `/api/v1/incidents/${bobs.id}`],
      ['GET', '/api/v1/incidents/not-an-id'],
      ['POST', `/api/v1/incidents/${bobs.id}/acknowledge`],
      ['POST', `/api/v1/incidents/${bobs.id}/resolve`],
      ['POST', '/api/v1/incidents/not-an-id/resolve'],
    ] as const) {
      const res = await api.call(method, path, aliceKey)
      expect(res.status, path).toBe(404)
      expect(res.body, path).toEqual(missing.body)
    }
    expect((await api.call('GET', `/api/v1/incidents/${bobs.id}`, adminKey)).body).toMatchObject({ status: 'open' })
  })

  it('moves exactly as the spec table: open -> acknowledged -> resolved; a repeat answers it unchanged, every other move is 409 and changes nothing; nodes:write is needed', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const readKey = (await newKey(db, alice.id, { scopes: ['nodes:read'], now: api.clock.now() })).key
    const key = (await newKey(db, alice.id, { scopes: ['nodes:read', 'nodes:write'], now: api.clock.now() })).key
    const node = await ownedNode(db, 'down', {}, alice.id)
    const incident = await raise(db, node, 'node_down', 1)
    const direct = await raise(db, await ownedNode(db, 'down', {}, alice.id), 'node_down', 2)
    const auto = await raise(db, await ownedNode(db, 'down', {}, alice.id), 'node_down', 3)
    await db('incidents').where({ id: auto.id }).update({ status: 'auto_resolved', resolved_at: at(4 * MINUTE), resolved_by: 'auto' })
    const post = (id: string, move: string, k = key) => api.call('POST', `/api/v1/incidents/${id}/${move}`, k)

    expect((await post(incident.id, 'acknowledge', readKey)).status).toBe(403)
    const acked = await post(incident.id, 'acknowledge')
    expect(acked.status).toBe(200)
    expect(acked.body).toMatchObject({ status: 'acknowledged', acknowledged_at: api.clock.now().toISOString(), acknowledged_by: alice.id, version: incident.version + 1, changed: true })
    // A repeat answers the incident unchanged (docs/cli.md, "Repeats"): same time, same version.
    api.clock.advance(1_000)
    const again = await post(incident.id, 'acknowledge')
    expect(again.status).toBe(200)
    expect(again.body).toEqual({ ...(acked.body as object), changed: false })

    api.clock.advance(60_000)
    const resolved = await post(incident.id, 'resolve')
    expect(resolved.body).toMatchObject({ status: 'resolved', resolved_at: api.clock.now().toISOString(), resolved_by: alice.id, acknowledged_by: alice.id })
    const resolvedAgain = await post(incident.id, 'resolve')
    expect(resolvedAgain.status).toBe(200)
    expect(resolvedAgain.body).toEqual({ ...(resolved.body as object), changed: false })
    const ackResolved = await post(incident.id, 'acknowledge')
    expect(ackResolved.status).toBe(409)
    expect((ackResolved.body as { details: string }).details).toBe('resolved is final')
    for (const move of ['acknowledge', 'resolve']) {
      const onAuto = await post(auto.id, move)
      expect(onAuto.status, move).toBe(409)
      expect((onAuto.body as { error: string }).error).toContain('is auto_resolved')
    }
    expect(((await api.call('GET', `/api/v1/incidents/${incident.id}`, key)).body as Incident).status).toBe('resolved')
    expect(((await api.call('GET', `/api/v1/incidents/${auto.id}`, key)).body as Incident).status).toBe('auto_resolved')

    // open -> resolved directly; two resolutions racing: one resolves, the other is a repeat (one notification).
    const raced = await Promise.all([post(direct.id, 'resolve'), post(direct.id, 'resolve')])
    expect(raced.map((r) => r.status)).toEqual([200, 200])
    expect(raced.map((r) => (r.body as Incident).version)).toEqual([direct.version + 1, direct.version + 1])
    expect(raced.map((r) => (r.body as { changed: boolean }).changed).sort()).toEqual([false, true])
    expect((await notificationsOf(db, alice.id)).filter((n) => n.kind === 'incident_resolved').map((n) => n.data.incident_id).sort()).toEqual([incident.id, direct.id].sort())
  })

  it('of concurrent acknowledgements exactly one says it changed the incident; the others are repeats of it', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const alice = await newUser(db)
    const bob = await newUser(db, { admin: true })
    const aliceKey = (await newKey(db, alice.id, { scopes: ['nodes:read', 'nodes:write'], now: api.clock.now() })).key
    const bobKey = (await newKey(db, bob.id, { scopes: ['nodes:read', 'nodes:write', 'admin'], admin: true, now: api.clock.now() })).key
    const incident = await raise(db, await ownedNode(db, 'down', {}, alice.id), 'node_down', 1)
    const keys = [aliceKey, bobKey, aliceKey, bobKey, aliceKey, bobKey, aliceKey, bobKey]
    const acks = await Promise.all(keys.map((k) => api.call('POST', `/api/v1/incidents/${incident.id}/acknowledge`, k)))
    expect(acks.map((a) => a.status)).toEqual(keys.map(() => 200))
    const bodies = acks.map((a) => a.body as Incident & { changed: boolean })
    const winners = bodies.filter((b) => b.changed)
    expect(winners).toHaveLength(1)
    // Every answer is the one acknowledgement the database holds: the winner's.
    const stored = (await db('incidents').where({ id: incident.id }).first('acknowledged_by', 'version')) as { acknowledged_by: string; version: number }
    expect(stored).toEqual({ acknowledged_by: winners[0]?.acknowledged_by, version: incident.version + 1 })
    for (const b of bodies) expect(b).toMatchObject({ status: 'acknowledged', acknowledged_by: stored.acknowledged_by, version: incident.version + 1 })
  })

  it('documents the four routes in the OpenAPI document', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const doc = (await getJson(`${api.url}/api/v1/openapi.json`)).body as { paths: Record<string, Record<string, unknown>> }
    expect(Object.keys(doc.paths['/api/v1/incidents'] ?? {})).toEqual(['get'])
    expect(Object.keys(doc.paths['/api/v1/incidents/{id}'] ?? {})).toEqual(['get'])
    expect(Object.keys(doc.paths['/api/v1/incidents/{id}/acknowledge'] ?? {})).toEqual(['post'])
    expect(Object.keys(doc.paths['/api/v1/incidents/{id}/resolve'] ?? {})).toEqual(['post'])
  })
})
