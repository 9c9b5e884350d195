/**
 * Explicit bad input against the api-server with the real control-plane routes (issue 9, "Bad
 * input"): oversized bodies, deep JSON, wrong content types, invalid UTF-8, unicode and control
 * characters in names, SQL-looking text stored verbatim, and path traversal in manifest ids and
 * chain profile ids, on both databases.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { ADMIN_SCOPE } from '../../../src/auth/scopes.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { isErrorBody, newKey, newUser, startAuthApi } from '../auth/api-harness.js'
import { rawRequest, Resources } from './harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const LIMIT = 1024 * 1024


async function setup(dialect: (typeof DIALECTS)[number]) {
  const { db } = await resources.database(dialect)
  const api = await startAuthApi(resources, db, { perMinute: 1_000_000 })
  const user = await newUser(db)
  const admin = await newUser(db, { admin: true })
  const userKey = (await newKey(db, user.id, { scopes: ['*'] })).key
  const adminKey = (await newKey(db, admin.id, { scopes: ['*', ADMIN_SCOPE], admin: true })).key
  const json = (method: string, path: string, key: string, body: unknown) =>
    rawRequest(api.url, method, path, { 'x-api-key': key, 'content-type': 'application/json' }, Buffer.from(JSON.stringify(body), 'utf8'))
  return { db, api, user, userKey, adminKey, json }
}

const count = async (db: Db, table: string) => Number(((await db(table).count({ n: '*' })) as Array<{ n: unknown }>)[0]?.n)

describe.each(DIALECTS)('bad input on %s', (dialect) => {
  it('a body over the limit is 413, declared or chunked, and nothing is created', async () => {
    const { db, api, userKey } = await setup(dialect)
    const big = Buffer.from(JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', duration: '1m', pad: 'x'.repeat(LIMIT) }))
    const headers = { 'x-api-key': userKey, 'content-type': 'application/json' }
    for (const chunked of [false, true]) {
      const res = await rawRequest(api.url, 'POST', '/api/v1/subscriptions', headers, big, chunked)
      expect(res.status, `chunked: ${chunked}`).toBe(413)
      expect(isErrorBody(res.body)).toBe(true)
    }
    // Over the limit by Content-Length alone, even on a route without a body.
    const declared = await rawRequest(api.url, 'POST', '/api/v1/quotes', headers, big)
    expect(declared.status).toBe(413)
    expect(await count(db, 'subscriptions')).toBe(0)
    expect((await rawRequest(api.url, 'GET', '/health', {})).status).toBe(200)
  })

  it('deeply nested JSON (10,000 arrays or objects) is a 400, not a crash', async () => {
    const { api, userKey, adminKey } = await setup(dialect)
    const depth = 10_000
    const bodies = ['['.repeat(depth) + ']'.repeat(depth), '{"a":'.repeat(depth) + '1' + '}'.repeat(depth), `{"chain_profile_id":${'['.repeat(depth)}${']'.repeat(depth)}}`]
    for (const [path, key] of [['/api/v1/subscriptions', userKey], ['/api/v1/rollouts', adminKey], ['/api/v1/api-keys', userKey]] as const) {
      for (const body of bodies) {
        const res = await rawRequest(api.url, 'POST', path, { 'x-api-key': key, 'content-type': 'application/json' }, Buffer.from(body))
        expect(res.status, `${path} ${body.slice(0, 20)}`).toBe(400)
        expect(isErrorBody(res.body)).toBe(true)
      }
    }
    expect((await rawRequest(api.url, 'GET', '/health', {})).status).toBe(200)
  })

  it('a body that is not application/json is 415; a missing one is 400', async () => {
    const { db, api, userKey } = await setup(dialect)
    const valid = Buffer.from(JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', duration: '1m' }))
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json-patch+jsonx', 'image/png']) {
      const res = await rawRequest(api.url, 'POST', '/api/v1/subscriptions', { 'x-api-key': userKey, 'content-type': type }, valid)
      expect(res.status, type).toBe(415)
      expect(isErrorBody(res.body)).toBe(true)
    }
    const noType = await rawRequest(api.url, 'POST', '/api/v1/subscriptions', { 'x-api-key': userKey }, valid)
    expect(noType.status).toBe(415)
    const none = await rawRequest(api.url, 'POST', '/api/v1/subscriptions', { 'x-api-key': userKey, 'content-type': 'application/json' })
    expect(none.status).toBe(400)
    expect(await count(db, 'subscriptions')).toBe(0)
    // An unknown charset parameter on a UTF-8 body: read as UTF-8 (koa-body), or refused; never a 5xx.
    const unknownCharset = await rawRequest(api.url, 'POST', '/api/v1/subscriptions', { 'x-api-key': userKey, 'content-type': 'application/json; charset=ebcdic' }, valid)
    expect([201, 415]).toContain(unknownCharset.status)
  })

  it('malformed JSON and invalid UTF-8 are answered without a 5xx', async () => {
    const { api, userKey } = await setup(dialect)
    const headers = { 'x-api-key': userKey, 'content-type': 'application/json' }
    for (const raw of ['{', '{"name": }', "{'name': 'x'}", '{"name":"x",}', 'NaN', '"just a string"', '{"__proto__": {"admin": true}, "name": "x", "scopes": ["nodes:read"]}']) {
      const res = await rawRequest(api.url, 'POST', '/api/v1/api-keys', headers, Buffer.from(raw))
      expect(res.status, raw).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
    }
    // Bytes that are not UTF-8 inside a string: a 400, or the replacement character stored.
    const invalid = Buffer.concat([Buffer.from('{"name":"bad '), Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]), Buffer.from('","scopes":["nodes:read"]}')])
    const res = await rawRequest(api.url, 'POST', '/api/v1/api-keys', headers, invalid)
    expect(res.status === 400 || res.status === 201, `status ${res.status}: ${res.text}`).toBe(true)
    if (res.status === 400) expect(isErrorBody(res.body)).toBe(true)
  })

  it('unicode and control characters in names: stored and returned verbatim, or refused with 400; never a 5xx', async () => {
    const { db, api, userKey, json } = await setup(dialect)
    const names = ['ключ 🔑 名前', 'e\u0301 \u202eRTL\u202c \ufeffbom', 'tab\tnew\nline\rcr', 'a\u0000b', '\u0007\u001b[31mred', '\ud800 lone surrogate', 'low \udc00 alone']
    // No column can store these as sent (Postgres refuses NUL): refused with 400 on both databases.
    const unstorable = (name: string) => /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(name)
    for (const name of names) {
      const before = await count(db, 'api_keys')
      const res = await json('POST', '/api/v1/api-keys', userKey, { name, scopes: ['nodes:read'] })
      expect([201, 400], `${JSON.stringify(name)}: ${res.status} ${res.text}`).toContain(res.status)
      if (unstorable(name)) expect(res.status, JSON.stringify(name)).toBe(400)
      if (res.status === 400) {
        expect(isErrorBody(res.body)).toBe(true)
        expect(await count(db, 'api_keys')).toBe(before)
        continue
      }
      const created = res.body as { id: string; name: string }
      const read = await rawRequest(api.url, 'GET', `/api/v1/api-keys/${created.id}`, { 'x-api-key': userKey })
      expect(read.status).toBe(200)
      // What was stored is what the creation answered, and the name as sent (trimmed).
      expect((read.body as { name: string }).name).toBe(created.name)
      expect(created.name).toBe(name.trim())
    }
  })

  it('SQL-looking text in a free-text field is stored and returned verbatim', async () => {
    const { db, api, userKey, json } = await setup(dialect)
    for (const name of ["'; DROP TABLE users; --", "x' OR '1'='1", 'Robert"); DELETE FROM api_keys;--', '%_\\', '$1 ? :name']) {
      const res = await json('POST', '/api/v1/api-keys', userKey, { name, scopes: ['nodes:read'] })
      expect(res.status, res.text).toBe(201)
      const { id } = res.body as { id: string }
      const read = await rawRequest(api.url, 'GET', `/api/v1/api-keys/${id}`, { 'x-api-key': userKey })
      expect((read.body as { name: string }).name).toBe(name)
      expect((await db('api_keys').where({ id }).first('name')).name).toBe(name)
    }
    expect(await count(db, 'users')).toBe(2)
  })

  it('path traversal in manifest ids and chain profile ids is a 400 before any file is read; nothing is written', async () => {
    const { db, adminKey, userKey, json } = await setup(dialect)
    const traversals = ['../../etc/passwd', '..%2F..%2Fetc%2Fpasswd', '/etc/passwd', '..', 'devnet/../../x', '..\\..\\x']
    for (const upgradeId of traversals) {
      const res = await json('POST', '/api/v1/rollouts', adminKey, { upgrade_id: upgradeId, chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' })
      expect(res.status, upgradeId).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
      // Refused by the request schema (the id pattern), so no path was ever built from it.
      expect((res.body as { details: string }).details).toContain('body.upgrade_id')
      expect(res.text).not.toContain('root:')
    }
    for (const chainProfileId of ['../x', '../../etc/passwd', '..']) {
      const rollout = await json('POST', '/api/v1/rollouts', adminKey, { upgrade_id: 'devnet-1.1.0', chain_profile_id: chainProfileId, node_type: 'full', source_version: '1.0.0' })
      expect(rollout.status, chainProfileId).toBe(400)
      expect(isErrorBody(rollout.body)).toBe(true)
      const group = await json('POST', '/api/v1/rollout-groups', adminKey, {
        chain_profile_id: chainProfileId,
        node_type: 'full',
        failure_policy: 'manual',
        component_order: [{ upgrade_id: '../../etc/passwd', binary_name: 'devnet-node', node_type: 'full', version: '1.1.0' }],
      })
      expect(group.status, chainProfileId).toBe(400)
      const subscription = await json('POST', '/api/v1/subscriptions', userKey, { chain_profile_id: chainProfileId, node_type: 'full', duration: '1m' })
      expect(subscription.status, chainProfileId).toBe(400)
      expect(isErrorBody(subscription.body)).toBe(true)
      const quote = await json('POST', '/api/v1/quotes', userKey, { items: [{ chain_profile_id: chainProfileId, node_type: 'full', duration: '1m' }] })
      // No payment service here: 400 for the item or 503, never a file read or a 500.
      expect([400, 503]).toContain(quote.status)
    }
    for (const table of ['rollouts', 'rollout_groups', 'subscriptions']) expect(await count(db, table), table).toBe(0)
  })

  it('a NUL character in a query or path parameter is a 400, not a database error', async () => {
    const { api, adminKey, userKey } = await setup(dialect)
    for (const [path, key] of [['/api/v1/rollouts?chain_profile_id=a%00b', adminKey], ['/api/v1/rollouts/a%00b', adminKey], ['/api/v1/subscriptions/a%00b/inputs', userKey], ['/api/v1/nodes/%00', userKey]] as const) {
      const res = await rawRequest(api.url, 'GET', path, { 'x-api-key': key })
      expect(res.status, `${path}: ${res.text}`).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
    }
  })
})
