/**
 * The authorisation matrix (issue 9, "Bad input"), generated from the route table the server
 * exposes (GET /api/v1/openapi.json, built from each route's `auth` declaration): every endpoint x
 * (no credentials, a key holding each single scope, owner / another user / admin). A route in the
 * table without an entry in EXPECTATIONS below fails the test, so a new endpoint cannot skip it.
 *
 * Expected: no credentials -> 401; a credential without the route's scope -> 403; another user's
 * resource -> 404 (exactly like a missing one); admin-only routes -> 403 for a non-admin.
 */
import crypto from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ADMIN_SCOPE, API_KEY_SCOPES, hasScope } from '../../../src/auth/scopes.js'
import type { Db } from '../../../src/db/knex.js'
import { toJson } from '../../../src/db/dialect.js'
import { raiseIncident } from '../../../src/health/incident-store.js'
import { DEFAULT_INCIDENT_SETTINGS } from '../../../src/health/incident-rules.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { createNotification } from '../../../src/notifications/notifications.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'
import { Resources } from './harness.js'

type Auth = { kind: 'none' } | { kind: 'authenticated' } | { kind: 'scope'; scope: string }

interface Operation {
  key: string
  method: string
  path: string
  auth: Auth
  queryParams: string[]
}

/** Whose resource a path id names, and who besides the owner may reach it. */
type Ownership =
  /** No owned resource in the path (lists, creation, system routes, admin-only routes). */
  | 'none'
  /** Only the owner, admins included: an admin gets the same 404 as another user. */
  | 'owner-only'
  /** The owner, or any admin credential. */
  | 'owner-or-admin'

interface Fixture {
  db: Db
  ownerId: string
  otherId: string
  adminId: string
}

interface Expectation {
  ownership: Ownership
  /** Path parameters naming a fresh resource of the owner (called anew for each caller). */
  params?: (f: Fixture) => Promise<Record<string, string>>
  /** A body that passes validation, so the answer is about authorisation, not input. */
  body?: unknown
}

const recipientKey = (): string => {
  const der = crypto.generateKeyPairSync('x25519').publicKey.export({ format: 'der', type: 'spki' })
  return der.subarray(der.length - 32).toString('base64')
}

/** An active subscription without a node: it still accepts inputs. */
async function ownedSubscription(f: Fixture): Promise<string> {
  return insertSubscription(f.db, f.ownerId)
}

async function ownedNode(f: Fixture): Promise<string> {
  const subscriptionId = await insertSubscription(f.db, f.ownerId)
  return (await insertNode(f.db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date())).id
}

async function ownedIncident(f: Fixture): Promise<string> {
  const subscriptionId = await insertSubscription(f.db, f.ownerId)
  const node = await insertNode(f.db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date())
  const now = new Date()
  const raised = await f.db.transaction((trx) =>
    raiseIncident(
      trx,
      { nodeId: node.id, subscriptionId, chainProfileId: 'devnet', category: 'node_down', occurredAt: now, title: 'down', description: 'test', metadata: { trigger: 'test' } },
      DEFAULT_INCIDENT_SETTINGS.flapping,
      now,
    ),
  )
  return raised.incident.id
}

async function ownedPayment(f: Fixture): Promise<string> {
  const id = crypto.randomUUID()
  const now = new Date()
  await f.db('payment_requests').insert({
    id,
    user_id: f.ownerId,
    idempotency_key: `k-${id}`,
    method: 'card',
    crypto_currency: null,
    status: 'pending',
    amount_minor: 1500,
    currency: 'USD',
    subscription_ids: toJson([]),
    failure_reason: null,
    completed_at: null,
    created_at: now,
    updated_at: now,
  })
  return id
}

const id = (make: (f: Fixture) => Promise<string>) => async (f: Fixture) => ({ id: await make(f) })
// A key may only pass on scopes it holds: keys of api-keys:manage alone, so that one scope suffices.
const ownKey = id(async (f) => (await newKey(f.db, f.ownerId, { scopes: ['api-keys:manage'] })).id)
const randomId = async () => ({ id: crypto.randomUUID() })
const randomRolloutNode = async () => ({ id: crypto.randomUUID(), nodeId: crypto.randomUUID() })
const notification = id(async (f) => (await createNotification(f.db, { userId: f.ownerId, kind: 'payment_failed', title: 't', body: 'b', data: {} }, new Date())).id)

const lineItem = { chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }

/** One entry per route of the table; the test fails when the two sets differ. */
const EXPECTATIONS: Record<string, Expectation> = {
  'GET /health': { ownership: 'none' },
  'GET /readyz': { ownership: 'none' },
  'GET /metrics': { ownership: 'none' },
  'GET /api/v1/openapi.json': { ownership: 'none' },
  'GET /api/v1/me': { ownership: 'none' },
  'POST /api/v1/api-keys': { ownership: 'none', body: { name: 'matrix', scopes: ['api-keys:manage'] } },
  'GET /api/v1/api-keys': { ownership: 'none' },
  'GET /api/v1/api-keys/{id}': { ownership: 'owner-only', params: ownKey },
  'POST /api/v1/api-keys/{id}/rotate': { ownership: 'owner-only', params: ownKey },
  'POST /api/v1/api-keys/{id}/revoke': { ownership: 'owner-only', params: ownKey },
  'DELETE /api/v1/api-keys/{id}': { ownership: 'owner-only', params: ownKey },
  'POST /api/v1/wallet/register-public-key': { ownership: 'none', body: { message: 'not signed', signature: '0x00' } },
  'POST /api/v1/wallet/nonce': { ownership: 'none', body: { address: '0x52908400098527886E0F7030069857D2E4169EE7' } },
  'GET /api/v1/nodes': { ownership: 'none' },
  'GET /api/v1/nodes/{id}': { ownership: 'owner-or-admin', params: id(ownedNode) },
  'GET /api/v1/crypto/public-key': { ownership: 'none' },
  'POST /api/v1/nodes/{id}/keys/export': { ownership: 'owner-only', params: id(ownedNode), body: { recipient_public_key: recipientKey() } },
  'POST /api/v1/subscriptions/{id}/inputs': { ownership: 'owner-only', params: id((f) => ownedSubscription(f)), body: { inputs: [{ name: 'operator_label', value: 'x' }] } },
  'GET /api/v1/subscriptions/{id}/inputs': { ownership: 'owner-or-admin', params: id((f) => ownedSubscription(f)) },
  'POST /api/v1/subscriptions': { ownership: 'none', body: { chain_profile_id: 'devnet', node_type: 'full', duration: '1m' } },
  'GET /api/v1/subscriptions': { ownership: 'none' },
  'GET /api/v1/subscriptions/{id}': { ownership: 'owner-or-admin', params: id((f) => ownedSubscription(f)) },
  'POST /api/v1/subscriptions/{id}/reprovision': { ownership: 'none', params: randomId },
  'GET /api/v1/chains': { ownership: 'none' },
  'POST /api/v1/payments': {
    ownership: 'none',
    body: { items: [lineItem], method: 'card', idempotency_key: 'matrix-1', return_url: 'https://example.test/ok', cancel_url: 'https://example.test/no' },
  },
  'GET /api/v1/payments': { ownership: 'none' },
  'GET /api/v1/payments/{id}': { ownership: 'owner-or-admin', params: id(ownedPayment) },
  'POST /api/v1/payments/{id}/cancel': { ownership: 'owner-or-admin', params: id(ownedPayment) },
  'POST /api/v1/quotes': { ownership: 'none', body: { items: [lineItem] } },
  'GET /api/v1/payment-methods': { ownership: 'none' },
  'GET /api/v1/notifications': { ownership: 'none' },
  'POST /api/v1/notifications/{id}/read': { ownership: 'owner-only', params: notification },
  'GET /api/v1/nodes/{id}/uptime': { ownership: 'owner-or-admin', params: id(ownedNode) },
  'GET /api/v1/nodes/{id}/uptime/history': { ownership: 'owner-or-admin', params: id(ownedNode) },
  'GET /api/v1/nodes/{id}/usage': { ownership: 'owner-or-admin', params: id(ownedNode) },
  'GET /api/v1/uptime': { ownership: 'none' },
  'GET /api/v1/incidents': { ownership: 'none' },
  'GET /api/v1/incidents/{id}': { ownership: 'owner-or-admin', params: id(ownedIncident) },
  'POST /api/v1/incidents/{id}/acknowledge': { ownership: 'owner-or-admin', params: id(ownedIncident) },
  'POST /api/v1/incidents/{id}/resolve': { ownership: 'owner-or-admin', params: id(ownedIncident) },
  'POST /api/v1/rollouts': {
    ownership: 'none',
    body: { chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0', upgrade_id: 'no-such-upgrade' },
  },
  'GET /api/v1/rollouts': { ownership: 'none' },
  'GET /api/v1/rollouts/{id}': { ownership: 'none', params: randomId },
  'GET /api/v1/artifacts/{binary_name}/{version}': { ownership: 'none', params: async () => ({ binary_name: 'devnet-node', version: '9.9.9' }) },
  // Without a host fleet configured an admin's add answers 503 (admitted); the rest answer 404 for an unknown host.
  'POST /api/v1/hosts': {
    ownership: 'none',
    body: { name: 'fra-1', address: '10.213.0.2', user: 'root', ssh_private_key: 'not checked before the fleet', region: 'eu', capacity: { cpu: 1, memory_bytes: 1, disk_bytes: 1 } },
  },
  'GET /api/v1/hosts': { ownership: 'none' },
  'GET /api/v1/hosts/{host}': { ownership: 'none', params: async () => ({ host: 'no-such-host' }) },
  'POST /api/v1/hosts/{host}/cordon': { ownership: 'none', params: async () => ({ host: 'no-such-host' }) },
  'POST /api/v1/hosts/{host}/uncordon': { ownership: 'none', params: async () => ({ host: 'no-such-host' }) },
  'POST /api/v1/hosts/{host}/drain': { ownership: 'none', params: async () => ({ host: 'no-such-host' }) },
  'DELETE /api/v1/hosts/{host}': { ownership: 'none', params: async () => ({ host: 'no-such-host' }) },
  'GET /api/v1/rollouts/{id}/nodes': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/start': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/pause': { ownership: 'none', params: randomId },
  'POST /api/v1/admin/users/{user}/disable': { ownership: 'none', params: async () => ({ user: '00000000-0000-4000-8000-000000000000' }) },
  'POST /api/v1/admin/users/{user}/enable': { ownership: 'none', params: async () => ({ user: '00000000-0000-4000-8000-000000000000' }) },
  'POST /api/v1/admin/api-keys/{id}/revoke': { ownership: 'none', params: randomId },
  'GET /api/v1/admin/users': { ownership: 'none' },
  'POST /api/v1/admin/users': { ownership: 'none', body: { email: 'matrix@example.test' } },
  'POST /api/v1/admin/users/{user}/grant-admin': { ownership: 'none', params: async () => ({ user: '00000000-0000-4000-8000-000000000000' }) },
  'POST /api/v1/admin/users/{user}/revoke-admin': { ownership: 'none', params: async () => ({ user: '00000000-0000-4000-8000-000000000000' }) },
  'POST /api/v1/admin/nodes/{id}/provision': { ownership: 'none', params: randomId },
  'POST /api/v1/admin/nodes/{id}/migrate': { ownership: 'none', params: randomId, body: {} },
  'POST /api/v1/admin/nodes/{id}/terminate': { ownership: 'none', params: randomId, body: {} },
  'GET /api/v1/admin/workflow-runs': { ownership: 'none' },
  'GET /api/v1/admin/workflow-runs/{id}': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/resume': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/cancel': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/rollback': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/force': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/approve-canary': { ownership: 'none', params: randomId },
  'POST /api/v1/rollouts/{id}/nodes/{nodeId}/retry': { ownership: 'none', params: randomRolloutNode },
  'POST /api/v1/rollout-groups': {
    ownership: 'none',
    body: { chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '9.9.9' }] },
  },
  'GET /api/v1/rollout-groups/{id}': { ownership: 'none', params: randomId },
  'GET /api/v1/rollout-groups/{id}/status': { ownership: 'none', params: randomId },
  'POST /api/v1/rollout-groups/{id}/start': { ownership: 'none', params: randomId },
  'POST /api/v1/rollout-groups/{id}/pause': { ownership: 'none', params: randomId },
  'POST /api/v1/rollout-groups/{id}/resume': { ownership: 'none', params: randomId },
  'POST /api/v1/rollout-groups/{id}/cancel': { ownership: 'none', params: randomId },
  'POST /api/v1/rollout-groups/{id}/skip': { ownership: 'none', params: randomId },
}

/** The operations of the OpenAPI document, with the auth each one declares. */
function operationsOf(document: unknown): Operation[] {
  const paths = (document as { paths: Record<string, Record<string, { security?: Array<Record<string, string[]>>; parameters?: Array<{ in: string; name: string }> }>> }).paths
  const operations: Operation[] = []
  for (const [path, methods] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const requirement = op.security?.[0]
      const scopes = requirement ? (Object.values(requirement)[0] ?? []) : undefined
      const auth: Auth = scopes === undefined ? { kind: 'none' } : scopes.length === 0 ? { kind: 'authenticated' } : { kind: 'scope', scope: scopes[0] as string }
      const queryParams = (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name)
      operations.push({ key: `${method.toUpperCase()} ${path}`, method: method.toUpperCase(), path, auth, queryParams })
    }
  }
  return operations.sort((a, b) => a.key.localeCompare(b.key))
}

/** Every single scope a key can hold, plus admin. */
const SINGLE_SCOPES = [...API_KEY_SCOPES, ADMIN_SCOPE]

function grants(scopes: readonly string[], auth: Auth): boolean {
  return auth.kind !== 'scope' || hasScope(scopes, auth.scope)
}

const resources = new Resources()

describe.each(DIALECTS)('authorisation matrix on %s', (dialect) => {
  let api: AuthApi
  let fixture: Fixture
  let operations: Operation[]
  const keys = { owner: '', other: '', admin: '', adminWithoutAdminScope: '' }
  /** Owner keys holding exactly one scope each (admin: on the admin user). */
  const single = new Map<string, string>()

  beforeAll(async () => {
    const { db } = await resources.database(dialect)
    api = await startAuthApi(resources, db, { perMinute: 1_000_000, failureLimitPerMinute: 1_000_000 })
    const owner = await newUser(db)
    const other = await newUser(db)
    const admin = await newUser(db, { admin: true })
    fixture = { db, ownerId: owner.id, otherId: other.id, adminId: admin.id }
    keys.owner = (await newKey(db, owner.id, { scopes: ['*'] })).key
    keys.other = (await newKey(db, other.id, { scopes: ['*'] })).key
    keys.admin = (await newKey(db, admin.id, { scopes: ['*', ADMIN_SCOPE], admin: true })).key
    keys.adminWithoutAdminScope = (await newKey(db, admin.id, { scopes: ['*'] })).key
    for (const scope of SINGLE_SCOPES) {
      const user = scope === ADMIN_SCOPE ? admin.id : owner.id
      single.set(scope, (await newKey(db, user, { scopes: [scope], admin: scope === ADMIN_SCOPE })).key)
    }
    // The route table as the server exposes it.
    const doc = await api.call('GET', '/api/v1/openapi.json')
    expect(doc.status).toBe(200)
    operations = operationsOf(doc.body)
  })
  afterAll(() => resources.cleanup())

  it('covers exactly the routes of the route table (a new endpoint needs an entry here)', () => {
    const inTable = operations.map((o) => o.key)
    expect(inTable.filter((k) => !(k in EXPECTATIONS))).toEqual([])
    expect(Object.keys(EXPECTATIONS).filter((k) => !inTable.includes(k))).toEqual([])
    // The document and the route table agree on every route's auth.
    const table = controlPlaneRoutes({ db: fixture.db })
    for (const route of table) {
      const op = operations.find((o) => o.key === `${route.method.toUpperCase()} ${route.path}`)
      const expected: Auth = route.auth === 'none' ? { kind: 'none' } : route.auth === 'authenticated' ? { kind: 'authenticated' } : { kind: 'scope', scope: route.auth.scope }
      expect(op?.auth, route.path).toEqual(expected)
    }
    // Everything under /api/v1 but the public key and the document needs a credential.
    const open = operations.filter((o) => o.auth.kind === 'none' && o.path.startsWith('/api/v1/')).map((o) => o.key)
    expect(open.sort()).toEqual(['GET /api/v1/crypto/public-key', 'GET /api/v1/openapi.json'])
  })

  const request = async (op: Operation, key: string | undefined, params: Record<string, string> = {}, query = '') => {
    const expectation = EXPECTATIONS[op.key] as Expectation
    const path = op.path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? crypto.randomUUID())) + query
    return api.call(op.method, path, { ...(key !== undefined ? { apiKey: key } : {}), ...(expectation.body !== undefined ? { body: expectation.body } : {}) })
  }
  const paramsFor = (op: Operation) => (EXPECTATIONS[op.key]?.params ?? (async () => ({})))(fixture)

  it.each(Object.keys(EXPECTATIONS).sort())('%s', async (key) => {
    const op = operations.find((o) => o.key === key)
    expect(op, `${key} is in EXPECTATIONS but not in the route table`).toBeDefined()
    if (!op) return
    const expectation = EXPECTATIONS[key] as Expectation
    const problems: string[] = []
    const check = (who: string, res: { status: number; body: unknown }, ok: (status: number) => boolean, want: string) => {
      if (!ok(res.status)) problems.push(`${who}: ${res.status} (${JSON.stringify(res.body).slice(0, 200)}), want ${want}`)
      else if (res.status >= 400 && !isErrorBody(res.body)) problems.push(`${who}: ${res.status} without an {error, details} body`)
      if (res.status >= 500 && res.status !== 503) problems.push(`${who}: server error ${res.status}`)
    }
    const admitted = (s: number) => s !== 401 && s !== 403

    // No credentials.
    const anonymous = await request(op, undefined, await paramsFor(op))
    if (op.auth.kind === 'none') check('no credentials', anonymous, admitted, 'served')
    else check('no credentials', anonymous, (s) => s === 401, '401')
    // A broken credential is no better than none.
    if (op.auth.kind !== 'none') check('unknown key', await request(op, 'np_' + 'x'.repeat(40), await paramsFor(op)), (s) => s === 401, '401')

    // Every single scope: 403 exactly when it does not grant the route's.
    const sweepParams = await paramsFor(op)
    for (const scope of SINGLE_SCOPES) {
      const res = await request(op, single.get(scope), sweepParams)
      if (op.auth.kind === 'none') check(`scope ${scope}`, res, admitted, 'served')
      else if (grants([scope], op.auth)) check(`scope ${scope}`, res, admitted, 'admitted')
      else check(`scope ${scope}`, res, (s) => s === 403, '403')
    }
    // An admin user's key without the admin scope is not an admin credential.
    if (op.auth.kind === 'scope' && op.auth.scope === ADMIN_SCOPE) {
      check('admin user, key without admin', await request(op, keys.adminWithoutAdminScope, await paramsFor(op)), (s) => s === 403, '403')
    }

    const adminOnly = op.auth.kind === 'scope' && op.auth.scope === ADMIN_SCOPE
    // The owner with every user scope.
    const owner = await request(op, keys.owner, await paramsFor(op))
    if (adminOnly) check('owner (non-admin)', owner, (s) => s === 403, '403')
    else check('owner', owner, (s) => admitted(s) && (expectation.ownership === 'none' || s !== 404), 'admitted, not 404')
    // Another user.
    const other = await request(op, keys.other, await paramsFor(op))
    if (adminOnly) check('other user (non-admin)', other, (s) => s === 403, '403')
    else if (expectation.ownership !== 'none') {
      check('other user', other, (s) => s === 404, '404')
      // Exactly the body of a resource that does not exist.
      const missing = await request(op, keys.other, Object.fromEntries(Object.keys(await paramsFor(op)).map((name) => [name, crypto.randomUUID()])))
      if (missing.status === 404 && other.status === 404) {
        const strip = (b: unknown) => JSON.stringify(b).replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>')
        if (strip(other.body) !== strip(missing.body)) problems.push(`other user: 404 body differs from a missing resource's: ${strip(other.body)} vs ${strip(missing.body)}`)
      }
    } else check('other user', other, admitted, 'admitted')
    // An admin.
    const admin = await request(op, keys.admin, await paramsFor(op))
    if (expectation.ownership === 'owner-only') check('admin on an owner-only resource', admin, (s) => s === 404, '404')
    else if (expectation.ownership === 'owner-or-admin') check('admin', admin, (s) => admitted(s) && s !== 404, 'admitted, not 404')
    else check('admin', admin, admitted, 'admitted')

    // Listings filtered by user: a non-admin naming another user is refused, an admin is not.
    if (op.queryParams.includes('user_id')) {
      check('owner filtering by another user', await request(op, keys.owner, {}, `?user_id=${fixture.otherId}`), (s) => s === 403, '403')
      check('owner filtering by themselves', await request(op, keys.owner, {}, `?user_id=${fixture.ownerId}`), (s) => s === 200, '200')
      check('admin filtering by a user', await request(op, keys.admin, {}, `?user_id=${fixture.otherId}`), (s) => s === 200, '200')
    }
    expect(problems).toEqual([])
  })
})
