/**
 * Property-based fuzzing (fast-check) of every route of the api-server's route table, read from
 * the OpenAPI document the server exposes: random JSON bodies (any value, the right keys with
 * wrong types, huge strings, unicode and control characters, SQL-looking text, deep nesting),
 * random query strings and random path ids (traversal included), as an admin and as a normal user.
 *
 * Property: never a 5xx (503 only where the route documents it, e.g. payments without a payment
 * service); every 4xx/503 is an `{error, details}` JSON body; and a refused request writes
 * nothing (row counts of every table before and after).
 */
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ADMIN_SCOPE } from '../../../src/auth/scopes.js'
import { isPostgres } from '../../../src/db/dialect.js'
import type { Db } from '../../../src/db/knex.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from '../auth/api-harness.js'
import { rawRequest, Resources } from './harness.js'

const NUM_RUNS = 20

interface Operation {
  key: string
  method: string
  path: string
  /** Statuses the route documents (503 allowed only when listed). */
  statuses: Set<number>
  queryParams: string[]
  /** Top-level property names of the JSON body; undefined when the route takes no body. */
  bodyKeys: string[] | undefined
  needsAuth: boolean
}

type Schema = { $ref?: string; properties?: Record<string, unknown>; allOf?: Schema[] }

function operationsOf(document: unknown): Operation[] {
  const doc = document as {
    paths: Record<string, Record<string, { security?: unknown[]; parameters?: Array<{ in: string; name: string }>; requestBody?: { content: Record<string, { schema: Schema }> }; responses: Record<string, unknown> }>>
    components?: { schemas?: Record<string, Schema> }
  }
  const resolve = (schema: Schema | undefined): Schema | undefined => {
    if (schema?.$ref) return resolve(doc.components?.schemas?.[schema.$ref.split('/').pop() as string])
    if (schema?.allOf) return { properties: Object.assign({}, ...schema.allOf.map((s) => resolve(s)?.properties ?? {})) }
    return schema
  }
  const ops: Operation[] = []
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const body = op.requestBody ? resolve(op.requestBody.content['application/json']?.schema) : undefined
      ops.push({
        key: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        statuses: new Set(Object.keys(op.responses).map(Number)),
        queryParams: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
        bodyKeys: op.requestBody ? Object.keys(body?.properties ?? {}) : undefined,
        needsAuth: op.security !== undefined,
      })
    }
  }
  return ops.sort((a, b) => a.key.localeCompare(b.key))
}


/** Row counts of every table, in one statement. */
async function tableCounts(db: Db): Promise<Record<string, number>> {
  const tables = isPostgres(db)
    ? ((await db('information_schema.tables').where({ table_schema: 'public', table_type: 'BASE TABLE' }).pluck('table_name')) as string[])
    : ((await db('sqlite_master').where({ type: 'table' }).andWhereNot('name', 'like', 'sqlite_%').pluck('name')) as string[])
  const names = tables.filter((t) => !t.startsWith('knex_')).sort()
  const sql = names.map((t) => `select '${t}' as t, count(*) as n from "${t}"`).join(' union all ')
  const result = (await db.raw(sql)) as { rows?: Array<{ t: string; n: unknown }> } | Array<{ t: string; n: unknown }>
  const rows = Array.isArray(result) ? result : (result.rows ?? [])
  return Object.fromEntries(rows.map((r) => [r.t, Number(r.n)]))
}

// ---- arbitraries -----------------------------------------------------------------------

const SQLISH = ["'; DROP TABLE users; --", "' OR '1'='1", '1; DELETE FROM subscriptions', '" OR ""="', "admin'--", '%', '_', '\\', "Robert'); DROP TABLE nodes;--"]
const TRAVERSAL = ['../../etc/passwd', '..%2F..%2Fetc%2Fpasswd', '%2e%2e%2f%2e%2e%2fetc%2fpasswd', '..\\..\\windows', '/etc/passwd', '....//....//etc', '%00', '..', '.']
const weirdString = fc.oneof(
  fc.string(),
  fc.fullUnicodeString({ maxLength: 50 }),
  fc.constantFrom(...SQLISH, ...TRAVERSAL, '\u0000', '\u202e', '\ud83d\ude00', '\ufeff', '\r\n', '\t', 'null', 'true', '-1', '1e309', 'NaN', '__proto__', 'constructor'),
  fc.integer({ min: 1_000, max: 300_000 }).map((n) => 'a'.repeat(n)),
  fc.string({ unit: fc.integer({ min: 0, max: 31 }).map((c) => String.fromCharCode(c)) }),
)
const deep = fc.integer({ min: 50, max: 3_000 }).chain((depth) => fc.constantFrom('[', '{"a":').map((open) => ({ depth, open })))
const anyJson = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
  { weight: 2, arbitrary: weirdString },
  { weight: 1, arbitrary: fc.constantFrom(null, true, 0, -1, 1e308, [], {}, Number.MAX_SAFE_INTEGER) },
)

function wrongTypes(keys: string[]) {
  return fc.dictionary(fc.constantFrom(...keys, '__proto__', 'extra'), anyJson, { minKeys: 1, maxKeys: keys.length + 2 })
}

/** A body as bytes: a JSON value, an object with the route's keys, or deep nesting. */
function bodyArbitrary(keys: string[]): fc.Arbitrary<Buffer> {
  const asJson = (value: unknown) => Buffer.from(JSON.stringify(value) ?? 'null', 'utf8')
  return fc.oneof(
    anyJson.map(asJson),
    (keys.length > 0 ? wrongTypes(keys) : fc.object()).map(asJson),
    fc.array(wrongTypes(keys.length > 0 ? keys : ['x']), { maxLength: 3 }).map(asJson),
    deep.map(({ depth, open }) => Buffer.from(open.repeat(depth) + (open === '[' ? ']'.repeat(depth) : '1' + '}'.repeat(depth)))),
  )
}

const queryString = (params: string[]) =>
  fc
    .array(fc.tuple(fc.oneof(fc.constantFrom(...params, 'limit', 'cursor', '__proto__', 'user_id'), fc.string({ maxLength: 8 })), weirdString.map((s) => s.slice(0, 2_000))), { maxLength: 5 })
    .map((pairs) => (pairs.length === 0 ? '' : '?' + pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')))

/** A path id: random text percent-encoded, or a traversal sent as is. */
const pathId = fc.oneof(
  weirdString.map((s) => encodeURIComponent(s.slice(0, 500)) || 'x'),
  fc.constantFrom(...TRAVERSAL.filter((t) => !t.includes('\\')), '%E0%A4%A', '%ZZ', '%', encodeURIComponent('../../etc/passwd')),
  fc.uuid().map((u) => u.toUpperCase()),
)

// ---- the suite -------------------------------------------------------------------------

const resources = new Resources()

describe.each(DIALECTS)('fuzzing every route on %s', (dialect) => {
  let api: AuthApi
  let db: Db
  let operations: Operation[]
  const keys: Record<'admin' | 'user', string> = { admin: '', user: '' }

  beforeAll(async () => {
    ;({ db } = await resources.database(dialect))
    api = await startAuthApi(resources, db, { perMinute: 10_000_000 })
    const user = await newUser(db)
    const admin = await newUser(db, { admin: true })
    keys.user = (await newKey(db, user.id, { scopes: ['*'] })).key
    keys.admin = (await newKey(db, admin.id, { scopes: ['*', ADMIN_SCOPE], admin: true })).key
    // Something to find, so a valid-looking id can reach deeper code.
    const subscriptionId = await insertSubscription(db, user.id)
    await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' }, new Date())
    const doc = await api.call('GET', '/api/v1/openapi.json')
    operations = operationsOf(doc.body)
  })
  afterAll(() => resources.cleanup())

  it('has routes to fuzz', () => {
    expect(operations.length).toBeGreaterThan(40)
    expect(operations.filter((o) => o.bodyKeys !== undefined).length).toBeGreaterThan(5)
  })

  // Each route of the table; the list is read inside the test, so a new route is fuzzed too.
  it('never answers 5xx, always {error, details}, and writes nothing on a refusal', { timeout: 120_000 }, async () => {
    const failures: string[] = []
    let sent = 0
    for (const op of operations) {
      if (op.path === '/metrics') continue // text/plain by design, no input
      const hasParams = op.path.includes('{')
      const known = failures.length
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom<'admin' | 'user'>('admin', 'user'),
          hasParams ? fc.array(pathId, { minLength: 2, maxLength: 2 }) : fc.constant([] as string[]),
          queryString(op.queryParams),
          op.bodyKeys !== undefined ? fc.option(bodyArbitrary(op.bodyKeys), { freq: 8 }) : fc.constant(null),
          async (who, ids, query, body) => {
            let i = 0
            const path = op.path.replace(/\{\w+\}/g, () => ids[i++] ?? 'x') + query
            const headers: Record<string, string> = { 'x-api-key': keys[who] }
            if (body) headers['content-type'] = 'application/json'
            const before = await tableCounts(db)
            const res = await rawRequest(api.url, op.method, path, headers, body ?? undefined)
            const where = `${op.key} as ${who}: ${op.method} ${path.slice(0, 200)} body ${body?.subarray(0, 200).toString('utf8') ?? '-'}`
            if (res.status >= 500 && !(res.status === 503 && op.statuses.has(503))) {
              failures.push(`${where} -> ${res.status} ${res.text.slice(0, 300)}`)
              return false
            }
            if (res.status >= 400 && !isErrorBody(res.body)) {
              failures.push(`${where} -> ${res.status} without {error, details}: ${res.text.slice(0, 300)}`)
              return false
            }
            if (res.status >= 400) {
              const after = await tableCounts(db)
              const changed = Object.keys(after).filter((t) => after[t] !== before[t])
              if (changed.length > 0) {
                failures.push(`${where} -> ${res.status} but rows changed in ${changed.join(', ')}`)
                return false
              }
            }
            return true
          },
        ),
        { numRuns: NUM_RUNS, endOnFailure: true },
      ).catch((err: unknown) => {
        // A false property is recorded above; anything else (a dropped connection) is a failure too.
        if (failures.length === known) failures.push(`${op.key}: ${String(err).slice(0, 500)}`)
      })
      sent += NUM_RUNS
    }
    expect(failures).toEqual([])
    expect(sent).toBeGreaterThan(40 * NUM_RUNS)
  })
})
