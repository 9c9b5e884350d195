import crypto from 'node:crypto'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import type { Db } from '../../../src/db/knex.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import { createDataKey, loadDataKey } from '../../../src/secrets/data-keys.js'
import { LocalFileMasterKey, type MasterKey } from '../../../src/secrets/master-key.js'
import { decryptNodeKey, generateNodeKey, storeNodeKey } from '../../../src/secrets/node-keys.js'
import { ensureServerKeyPair, rotateServerKeyPair } from '../../../src/secrets/server-key.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { isErrorBody, newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources, type StartedApi } from '../http/harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

interface Api extends StartedApi {
  call(method: string, path: string, init?: { bearer?: string; body?: unknown }): Promise<{ status: number; headers: Headers; body: unknown }>
}

/** The api-server's app as the daemon wires it (authenticator, rate limit, control-plane routes), plus the master key. */
async function startApi(db: Db, masterKey?: MasterKey): Promise<Api> {
  const { authenticate } = authenticatorFromSettings(
    { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
    { db },
  )
  const limiter = createApiRateLimiter({ perMinute: 10_000 })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, routes: controlPlaneRoutes({ db, ...(masterKey ? { masterKey } : {}) }) })
  return {
    ...api,
    call: (method, path, init = {}) =>
      getJson(`${api.url}${path}`, {
        method,
        headers: {
          ...(init.bearer ? { authorization: `Bearer ${init.bearer}` } : {}),
          ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      }),
  }
}

async function ownedNode(db: Db, userId: string): Promise<string> {
  const subscriptionId = await insertSubscription(db, userId)
  return (await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'devnet', node_type: 'full' })).id
}

interface ExportAnswer {
  node_id: string
  keys: { name: string; key_type: string; public_key: string | null; sealed: string }[]
}

/** Opens an exported blob the way a client would, from the spec's layout alone. */
function clientOpen(sealedBase64: string, secretKey: Uint8Array): Buffer | null {
  const blob = new Uint8Array(Buffer.from(sealedBase64, 'base64'))
  const opened = nacl.box.open(blob.subarray(56), blob.subarray(32, 56), blob.subarray(0, 32), secretKey)
  return opened ? Buffer.from(opened) : null
}

describe.each(DIALECTS)('secrets API on %s', (dialect) => {
  it('GET /api/v1/crypto/public-key answers anyone: 503 before init, then the active key, then the rotated one', async () => {
    const { db } = await resources.database(dialect)
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const api = await startApi(db, mk)

    const before = await api.call('GET', '/api/v1/crypto/public-key')
    expect(before.status).toBe(503)
    expect(isErrorBody(before.body)).toBe(true)
    expect((before.body as { details: string }).details).toContain('nodeplane secrets init')

    const { publicKey } = await ensureServerKeyPair(db, mk)
    const after = await api.call('GET', '/api/v1/crypto/public-key')
    expect(after.status).toBe(200)
    expect(after.body).toEqual({ key_id: publicKey.key_id, public_key: publicKey.public_key, algorithm: 'x25519-xsalsa20-poly1305' })
    expect(after.headers.get('cache-control')).toBe('public, max-age=300')
    // A credential, even a bad one, changes nothing on an anonymous route.
    expect((await api.call('GET', '/api/v1/crypto/public-key', { bearer: 'not-a-token' })).status).toBe(200)

    const rotated = await rotateServerKeyPair(db, mk)
    expect(((await api.call('GET', '/api/v1/crypto/public-key')).body as { key_id: string }).key_id).toBe(rotated.publicKey.key_id)
    // Listed in the OpenAPI document without a security requirement.
    const doc = (await api.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, { security?: unknown }>> }
    expect(doc.paths['/api/v1/crypto/public-key']?.get?.security).toBeUndefined()
    expect(doc.paths['/api/v1/nodes/{id}/keys/export']?.post?.security).toEqual([{ bearerAuth: ['keys:export'] }])
  })

  it('POST /nodes/{id}/keys/export: 401 anonymous, 403 without keys:export, 404 for another user (admins too), 400 bad input', async () => {
    const { db } = await resources.database(dialect)
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const api = await startApi(db, mk)
    const owner = await newUser(db)
    const other = await newUser(db)
    const admin = await newUser(db, { admin: true })
    const nodeId = await ownedNode(db, owner.id)
    await generateNodeKey(db, { nodeId, name: 'validator', keyType: 'ed25519' }, await createDataKey(db, mk, nodeId))
    const ownerKey = (await newKey(db, owner.id, { scopes: ['keys:export'] })).key
    const narrowKey = (await newKey(db, owner.id, { scopes: ['nodes:read', 'nodes:write'] })).key
    const otherKey = (await newKey(db, other.id, { scopes: ['*'] })).key
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
    const recipient = nacl.box.keyPair()
    const body = { recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') }
    const path = `/api/v1/nodes/${nodeId}/keys/export`

    const anonymous = await api.call('POST', path, { body })
    expect(anonymous.status).toBe(401)
    expect(isErrorBody(anonymous.body)).toBe(true)

    const narrow = await api.call('POST', path, { bearer: narrowKey, body })
    expect(narrow.status).toBe(403)
    expect((narrow.body as { details: string }).details).toContain('keys:export')

    const foreign = await api.call('POST', path, { bearer: otherKey, body })
    const unknown = await api.call('POST', '/api/v1/nodes/00000000-0000-4000-8000-000000000000/keys/export', { bearer: ownerKey, body })
    const asAdmin = await api.call('POST', path, { bearer: adminKey, body })
    for (const res of [foreign, unknown, asAdmin]) {
      expect(res.status).toBe(404)
      expect(isErrorBody(res.body)).toBe(true)
    }
    expect(JSON.stringify(foreign.body).replaceAll(nodeId, '<id>')).toBe(JSON.stringify(unknown.body).replaceAll('00000000-0000-4000-8000-000000000000', '<id>'))

    const malformedId = await api.call('POST', '/api/v1/nodes/not-a-node/keys/export', { bearer: ownerKey, body })
    expect(malformedId.status).toBe(400)
    for (const bad of [
      {},
      { recipient_public_key: 'not base64 at all' },
      { recipient_public_key: Buffer.from(crypto.randomBytes(31)).toString('base64') },
      { recipient_public_key: Buffer.from(crypto.randomBytes(33)).toString('base64') },
      { recipient_public_key: Buffer.alloc(32).toString('base64') },
      { recipient_public_key: 12 },
    ]) {
      const res = await api.call('POST', path, { bearer: ownerKey, body: bad })
      expect(res.status, JSON.stringify(bad)).toBe(400)
      expect((res.body as { details: string }).details).toContain('recipient_public_key')
    }
    const zero = await api.call('POST', path, { bearer: ownerKey, body: { recipient_public_key: Buffer.alloc(32).toString('base64') } })
    expect((zero.body as { details: string }).details).toContain('small-order')
  })

  it('exports the exportable keys sealed to the recipient; they open to exactly the stored keys, and no key material is logged', async () => {
    const { db } = await resources.database(dialect)
    const masterKeyBytes = crypto.randomBytes(32)
    const mk = LocalFileMasterKey.fromBytes(masterKeyBytes)
    const api = await startApi(db, mk)
    const owner = await newUser(db)
    const nodeId = await ownedNode(db, owner.id)
    const emptyNodeId = await ownedNode(db, owner.id)
    const dataKey = await createDataKey(db, mk, nodeId)
    const ed = await generateNodeKey(db, { nodeId, name: 'validator', keyType: 'ed25519' }, dataKey)
    const eth = await generateNodeKey(db, { nodeId, name: 'signer', keyType: 'secp256k1' }, dataKey)
    await generateNodeKey(db, { nodeId, name: 'hot', keyType: 'ed25519', exportable: false }, dataKey)
    const keystore = Buffer.from('{"version":3,"crypto":{"ciphertext":"d1a1f00d"}}')
    await storeNodeKey(db, { nodeId, name: 'keystore.json', keyType: 'opaque', source: 'chain_generated', plaintext: keystore, exportable: true }, dataKey)
    const token = (await newKey(db, owner.id, { scopes: ['keys:export'] })).key
    const recipient = nacl.box.keyPair()

    const res = await api.call('POST', `/api/v1/nodes/${nodeId}/keys/export`, {
      bearer: token,
      body: { recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') },
    })
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('no-store')
    const answer = res.body as ExportAnswer
    expect(answer.node_id).toBe(nodeId)
    expect(answer.keys.map((k) => [k.name, k.key_type, k.public_key])).toEqual([
      ['keystore.json', 'opaque', null],
      ['signer', 'secp256k1', eth.public_key],
      ['validator', 'ed25519', ed.public_key],
    ])

    const stored = await loadDataKey(db, mk, nodeId)
    const secrets: Buffer[] = [masterKeyBytes, dataKey.bytes, Buffer.from(recipient.secretKey), await decryptNodeKey(db, stored, 'hot')]
    for (const key of answer.keys) {
      const opened = clientOpen(key.sealed, recipient.secretKey)
      expect(opened, key.name).not.toBeNull()
      const expected = await decryptNodeKey(db, stored, key.name)
      expect((opened as Buffer).equals(expected), key.name).toBe(true)
      secrets.push(expected)
      // Sealed to the recipient only: another key pair cannot open it.
      expect(clientOpen(key.sealed, nacl.box.keyPair().secretKey)).toBeNull()
    }
    expect(secrets.some((s) => s.equals(keystore))).toBe(true)

    const empty = await api.call('POST', `/api/v1/nodes/${emptyNodeId}/keys/export`, {
      bearer: token,
      body: { recipient_public_key: Buffer.from(recipient.publicKey).toString('base64') },
    })
    expect(empty.status).toBe(200)
    expect(empty.body).toEqual({ node_id: emptyNodeId, keys: [] })

    // The export is logged (who, which node, which keys), never what was exported.
    const exported = api.logs.lines.find((l) => l.msg === 'exported node keys')
    expect(exported).toMatchObject({ nodeId, keyNames: ['keystore.json', 'signer', 'validator'] })
    const logs = api.logs.text()
    for (const secret of secrets) {
      for (const encoding of ['hex', 'base64', 'base64url'] as const) expect(logs).not.toContain(secret.toString(encoding))
    }
    expect(logs).not.toContain(keystore.toString())
    // Nor does the response carry anything but sealed material and public keys.
    const text = JSON.stringify(answer)
    for (const secret of secrets) expect(text).not.toContain(secret.toString('base64'))
  })

  it('answers 503 when the server has no master key (secrets not initialised)', async () => {
    const { db } = await resources.database(dialect)
    const api = await startApi(db)
    const owner = await newUser(db)
    const nodeId = await ownedNode(db, owner.id)
    const token = (await newKey(db, owner.id, { scopes: ['keys:export'] })).key
    const res = await api.call('POST', `/api/v1/nodes/${nodeId}/keys/export`, {
      bearer: token,
      body: { recipient_public_key: Buffer.from(nacl.box.keyPair().publicKey).toString('base64') },
    })
    expect(res.status).toBe(503)
    expect(res.body).toEqual({ error: 'secrets are not initialised', details: expect.stringContaining('nodeplane secrets init') })
  })
})
