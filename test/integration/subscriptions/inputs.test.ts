import crypto from 'node:crypto'
import nacl from 'tweetnacl'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, loadChainCatalogue, type ChainCatalogue, type ProfileInput } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { insertNode } from '../../../src/nodes/node-store.js'
import type { NodeState } from '../../../src/nodes/states.js'
import { LocalFileMasterKey, type MasterKey } from '../../../src/secrets/master-key.js'
import { ensureServerKeyPair, openWithServerKey, rotateServerKeyPair } from '../../../src/secrets/server-key.js'
import { missingRequiredInputs, submitInputs } from '../../../src/subscriptions/inputs.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { isErrorBody, newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources, type StartedApi } from '../http/harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

let devnet: ChainCatalogue
beforeAll(async () => {
  devnet = await loadChainCatalogue(defaultConfigDir())
})

/** The devnet catalogue with its inputs changed (as another chain profile could declare them). */
function withInputs(change: (inputs: ProfileInput[]) => ProfileInput[]): ChainCatalogue {
  const profile = devnet.profiles.get('devnet')
  if (!profile) throw new Error('the devnet profile is missing')
  return { ...devnet, profiles: new Map([['devnet', { ...profile, inputs: change(profile.inputs.map((i) => ({ ...i }))) }]]) }
}

interface Api extends StartedApi {
  call(method: string, path: string, init?: { bearer?: string; body?: unknown }): Promise<{ status: number; headers: Headers; body: unknown }>
}

/** The api-server's app as the daemon wires it (authenticator, rate limit, control-plane routes). */
async function startApi(db: Db, options: { masterKey?: MasterKey; catalogue?: ChainCatalogue } = {}): Promise<Api> {
  const { authenticate } = authenticatorFromSettings(
    { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
    { db },
  )
  const limiter = createApiRateLimiter({ perMinute: 10_000 })
  const routes = controlPlaneRoutes({ db, chains: staticChainSource(options.catalogue ?? devnet), ...(options.masterKey ? { masterKey: options.masterKey } : {}) })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, routes })
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

/**
 * A client's sealed box written from the spec alone ("ephemeral public key 32 bytes, nonce 24
 * bytes, ciphertext"; NaCl box, X25519 + XSalsa20-Poly1305), not with the project's helper.
 */
function clientSeal(plaintext: Uint8Array, serverPublicKeyBase64: string): Buffer {
  const serverKey = new Uint8Array(Buffer.from(serverPublicKeyBase64, 'base64'))
  const ephemeral = nacl.box.keyPair()
  const nonce = nacl.randomBytes(24)
  const box = nacl.box(plaintext, nonce, serverKey, ephemeral.secretKey)
  return Buffer.concat([ephemeral.publicKey, nonce, box])
}

/** A subscription of devnet in `status`, optionally with a node in `nodeState` (test setup only). */
async function subscriptionOf(db: Db, userId: string, status = 'active', nodeState?: NodeState): Promise<string> {
  const id = await insertSubscription(db, userId)
  await db('subscriptions').where({ id }).update({ status })
  if (nodeState) {
    const node = await insertNode(db, { subscription_id: id, chain_profile_id: 'devnet', node_type: 'full' })
    await db('nodes').where({ id: node.id }).update({ state: nodeState })
  }
  return id
}

interface StoredRow {
  name: string
  type: string
  phase: string
  source: string | null
  key_type: string | null
  value: string | null
  sealed_value: Buffer | null
  status: string
}

async function storedInputs(db: Db, subscriptionId: string): Promise<StoredRow[]> {
  const rows = (await db('provisioning_inputs').where({ subscription_id: subscriptionId }).orderBy('name').select('name', 'type', 'phase', 'source', 'key_type', 'value', 'sealed_value', 'status')) as StoredRow[]
  return rows.map((r) => ({ ...r, sealed_value: r.sealed_value === null ? null : Buffer.from(r.sealed_value) }))
}

const details = (res: { body: unknown }): string => (res.body as { details: string }).details
const error = (res: { body: unknown }): string => (res.body as { error: string }).error

const PROOF = `0x${'ab'.repeat(65)}`
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000'

describe.each(DIALECTS)('provisioning inputs on %s', (dialect) => {
  async function setup(options: { catalogue?: ChainCatalogue; secrets?: boolean } = {}) {
    const { db } = await resources.database(dialect)
    const masterKey = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const serverKey = options.secrets === false ? undefined : (await ensureServerKeyPair(db, masterKey)).publicKey
    const api = await startApi(db, { ...(options.secrets === false ? {} : { masterKey }), ...(options.catalogue ? { catalogue: options.catalogue } : {}) })
    const owner = await newUser(db)
    const ownerKey = (await newKey(db, owner.id, { scopes: ['subscriptions:read', 'subscriptions:write'] })).key
    const post = (subscriptionId: string, inputs: unknown[], bearer = ownerKey) => api.call('POST', `/api/v1/subscriptions/${subscriptionId}/inputs`, { bearer, body: { inputs } })
    const get = (subscriptionId: string, bearer = ownerKey) => api.call('GET', `/api/v1/subscriptions/${subscriptionId}/inputs`, { bearer })
    const seal = (plaintext: string | Uint8Array) => {
      if (!serverKey) throw new Error('no server key in this setup')
      return clientSeal(typeof plaintext === 'string' ? Buffer.from(plaintext, 'utf8') : plaintext, serverKey.public_key)
    }
    return { db, api, masterKey, owner, ownerKey, post, get, seal }
  }

  it('stores text and proof values as plaintext and a user_provided secret byte for byte as sealed; never shows or logs the secret', async () => {
    const { db, api, masterKey, owner, post, get, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id, 'pending_payment')
    const secret = crypto.randomBytes(32)
    const sealed = seal(secret)

    const res = await post(subscriptionId, [
      { name: 'operator_label', value: 'rack 7' },
      { name: 'ownership_proof', value: PROOF },
      { name: 'fee_recipient_key', sealed: sealed.toString('base64') },
    ])
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    const body = res.body as { subscription_id: string; inputs: Array<Record<string, unknown>> }
    expect(body.subscription_id).toBe(subscriptionId)
    expect(body.inputs.map((i) => [i.name, i.type, i.source, i.status, i.value])).toEqual([
      ['fee_recipient_key', 'secret', 'user_provided', 'pending', null],
      ['operator_label', 'text', null, 'pending', 'rack 7'],
      ['ownership_proof', 'proof', null, 'pending', PROOF],
    ])
    expect(body.inputs[0]).toMatchObject({ key_type: 'secp256k1', phase: 'pre_provision', applied_at: null, set_at: expect.any(String) })

    const rows = await storedInputs(db, subscriptionId)
    expect(rows.map((r) => [r.name, r.type, r.phase, r.source, r.key_type, r.value, r.status])).toEqual([
      ['fee_recipient_key', 'secret', 'pre_provision', 'user_provided', 'secp256k1', null, 'pending'],
      ['operator_label', 'text', 'pre_provision', null, null, 'rack 7', 'pending'],
      ['ownership_proof', 'proof', 'pre_provision', null, null, PROOF, 'pending'],
    ])
    expect(rows[1]?.sealed_value).toBeNull()
    // Spec: the sealed box is "stored as received", and provisioning can still open it.
    expect(rows[0]?.sealed_value?.equals(sealed)).toBe(true)
    const opened = await openWithServerKey(db, masterKey, new Uint8Array(rows[0]?.sealed_value as Buffer))
    expect(Buffer.from(opened.plaintext).equals(secret)).toBe(true)

    const listed = await get(subscriptionId)
    expect(listed.status).toBe(200)
    expect(listed.body).toEqual({ subscription_id: subscriptionId, inputs: body.inputs, missing_required: [] })

    const logged = api.logs.lines.find((l) => l.msg === 'provisioning inputs submitted')
    expect(logged).toMatchObject({ subscriptionId, inputNames: ['operator_label', 'ownership_proof', 'fee_recipient_key'] })
    const everything = [api.logs.text(), JSON.stringify(res.body), JSON.stringify(listed.body)].join('\n')
    for (const form of [secret.toString('hex'), secret.toString('base64'), sealed.toString('base64'), sealed.toString('hex')]) expect(everything).not.toContain(form)
  })

  it('re-submitting replaces the value and sets it back to pending; a box sealed to a retired server key still opens', async () => {
    const { db, masterKey, owner, post, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id, 'active')
    expect((await post(subscriptionId, [{ name: 'operator_label', value: 'first' }])).status).toBe(200)
    const oldKeySealed = seal('first secret')
    await rotateServerKeyPair(db, masterKey)
    await db('provisioning_inputs').where({ subscription_id: subscriptionId }).update({ status: 'pending', updated_at: new Date(Date.now() - 60_000) })

    const res = await post(subscriptionId, [
      { name: 'operator_label', value: 'second' },
      { name: 'fee_recipient_key', sealed: oldKeySealed.toString('base64url') },
    ])
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    const rows = await storedInputs(db, subscriptionId)
    expect(rows.map((r) => [r.name, r.value, r.status])).toEqual([
      ['fee_recipient_key', null, 'pending'],
      ['operator_label', 'second', 'pending'],
    ])
    expect(rows[0]?.sealed_value?.equals(oldKeySealed)).toBe(true)
    expect((await db('provisioning_inputs').where({ subscription_id: subscriptionId })).length).toBe(2)
  })

  it('refuses values that fail their pattern, unknown names, generated and chain_generated secrets, plaintext secrets and sealed text (400, naming the input)', async () => {
    const { db, owner, post, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id, 'pending_payment')
    const cases: Array<[unknown, string]> = [
      [{ name: 'operator_label', value: 'no/slashes/allowed' }, 'operator_label: the value does not match its validation pattern'],
      [{ name: 'operator_label', value: 'x'.repeat(65) }, 'operator_label: the value does not match'],
      [{ name: 'ownership_proof', value: '0x1234' }, 'ownership_proof: the value does not match'],
      [{ name: 'operator_label' }, 'operator_label: a text input needs a "value"'],
      [{ name: 'operator_label', value: '' }, 'operator_label: the value must be a non-empty string'],
      [{ name: 'operator_label', sealed: seal('x').toString('base64') }, 'operator_label: a text input is sent as "value"'],
      [{ name: 'no_such_input', value: 'x' }, 'no_such_input: not an input of chain profile devnet (it takes: operator_label, ownership_proof, fee_recipient_key)'],
      [{ name: 'validator_key', sealed: seal('x').toString('base64') }, 'validator_key: this secret is generated by the service'],
      [{ name: 'nodekey', sealed: seal('x').toString('base64') }, 'nodekey: this secret is produced by the node'],
      [{ name: 'fee_recipient_key', value: 'plaintext-secret' }, 'fee_recipient_key: a secret is sent sealed'],
      [{ name: 'fee_recipient_key' }, 'fee_recipient_key: a secret input needs "sealed"'],
    ]
    for (const [input, expected] of cases) {
      const res = await post(subscriptionId, [input])
      expect(res.status, JSON.stringify(input)).toBe(400)
      expect(isErrorBody(res.body)).toBe(true)
      expect(details(res), JSON.stringify(input)).toContain(expected)
      expect(details(res)).not.toContain('plaintext-secret')
    }
    const tooLong = await post(subscriptionId, [{ name: 'operator_label', value: 'x'.repeat(4097) }])
    expect(tooLong.status).toBe(400)
    expect(details(tooLong)).toContain('body.inputs[0].value')
    const strange = await post(subscriptionId, [{ name: 'fee_recipient_key', secret: 'plaintext-secret' }])
    expect(strange.status).toBe(400)
    expect(details(strange)).not.toContain('plaintext-secret')
    const twice = await post(subscriptionId, [
      { name: 'operator_label', value: 'a' },
      { name: 'operator_label', value: 'b' },
    ])
    expect(twice.status).toBe(400)
    expect(details(twice)).toContain('operator_label: given more than once')
    for (const inputs of [[], Array.from({ length: 51 }, (_, i) => ({ name: `n${i}`, value: 'x' }))]) {
      const res = await post(subscriptionId, inputs)
      expect(res.status).toBe(400)
      expect(details(res)).toContain('body.inputs')
    }
    expect(await storedInputs(db, subscriptionId)).toEqual([])
  })

  it('matches a pattern against the whole value, and a secret pattern against the opened plaintext', async () => {
    const catalogue = withInputs((inputs) =>
      inputs.map((i) => (i.name === 'operator_label' ? { ...i, validation: '[a-z]+' } : i.name === 'fee_recipient_key' ? { ...i, validation: '[0-9a-f]{64}' } : i)),
    )
    const { db, post, owner, seal } = await setup({ catalogue })
    const subscriptionId = await subscriptionOf(db, owner.id)
    // Contains a match, but is not one: an unanchored pattern still has to match all of it.
    const partial = await post(subscriptionId, [{ name: 'operator_label', value: 'abc1' }])
    expect(partial.status).toBe(400)
    expect(details(partial)).toContain('operator_label: the value does not match its validation pattern [a-z]+')

    const hexKey = crypto.randomBytes(32).toString('hex')
    for (const bad of [`${hexKey}\n`, hexKey.slice(2), `zz${hexKey.slice(2)}`]) {
      const res = await post(subscriptionId, [{ name: 'fee_recipient_key', sealed: seal(bad).toString('base64') }])
      expect(res.status).toBe(400)
      expect(details(res)).toContain('fee_recipient_key: the opened secret does not match its validation pattern')
      expect(details(res)).not.toContain(bad.trim())
    }
    const notUtf8 = await post(subscriptionId, [{ name: 'fee_recipient_key', sealed: seal(new Uint8Array([0xff, 0xfe, 0x00])).toString('base64') }])
    expect(notUtf8.status).toBe(400)
    expect(details(notUtf8)).toContain('not UTF-8')
    expect(await storedInputs(db, subscriptionId)).toEqual([])

    const good = await post(subscriptionId, [
      { name: 'operator_label', value: 'abc' },
      { name: 'fee_recipient_key', sealed: seal(hexKey).toString('base64') },
    ])
    expect(good.status, JSON.stringify(good.body)).toBe(200)
    expect((await storedInputs(db, subscriptionId)).map((r) => r.name)).toEqual(['fee_recipient_key', 'operator_label'])
  })

  it('refuses sealed boxes that do not open: sealed to another key, truncated, tampered, crypto_box_seal-like, not base64 (400)', async () => {
    const { db, post, owner, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id)
    const good = seal('the secret')
    const stranger = clientSeal(Buffer.from('the secret'), Buffer.from(nacl.box.keyPair().publicKey).toString('base64'))
    const tampered = Buffer.from(good)
    tampered[tampered.length - 1] = (tampered[tampered.length - 1] as number) ^ 0x01
    const nonceFlipped = Buffer.from(good)
    nonceFlipped[40] = (nonceFlipped[40] as number) ^ 0x80
    // libsodium's crypto_box_seal layout: ephemeral key || ciphertext, no nonce.
    const long = seal(crypto.randomBytes(40))
    const withoutNonce = Buffer.concat([long.subarray(0, 32), long.subarray(56)])
    const cases: Array<[string, string]> = [
      [stranger.toString('base64'), 'sealed box does not open'],
      [tampered.toString('base64'), 'sealed box does not open'],
      [nonceFlipped.toString('base64'), 'sealed box does not open'],
      [good.subarray(0, good.length - 1).toString('base64'), 'sealed box does not open'],
      [withoutNonce.toString('base64'), 'sealed box does not open'],
      [good.subarray(0, 71).toString('base64'), 'the sealed box is 71 bytes; the layout needs at least 72'],
      ['not base64!', '"sealed" is not base64'],
    ]
    for (const [sealed, expected] of cases) {
      const res = await post(subscriptionId, [{ name: 'fee_recipient_key', sealed }])
      expect(res.status, expected).toBe(400)
      expect(details(res)).toContain(`fee_recipient_key: ${expected}`)
    }
    expect(await storedInputs(db, subscriptionId)).toEqual([])
  })

  it('writes nothing when one input of several is bad, and keeps the values stored before', async () => {
    const { db, post, owner, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id)
    expect((await post(subscriptionId, [{ name: 'operator_label', value: 'kept' }])).status).toBe(200)

    const res = await post(subscriptionId, [
      { name: 'operator_label', value: 'replaced' },
      { name: 'fee_recipient_key', sealed: seal('fine').toString('base64') },
      { name: 'ownership_proof', value: 'not a proof' },
    ])
    expect(res.status).toBe(400)
    expect(error(res)).toBe('invalid input ownership_proof')
    expect((await storedInputs(db, subscriptionId)).map((r) => [r.name, r.value])).toEqual([['operator_label', 'kept']])

    const two = await post(subscriptionId, [
      { name: 'operator_label', value: 'bad/label' },
      { name: 'fee_recipient_key', sealed: seal('fine').toString('base64') },
      { name: 'nope', value: 'x' },
    ])
    expect(error(two)).toBe('2 invalid inputs')
    expect(details(two)).toMatch(/operator_label: .*; nope: /)
    expect((await storedInputs(db, subscriptionId)).map((r) => [r.name, r.value])).toEqual([['operator_label', 'kept']])
  })

  it('401 without credentials, 403 without the scope, 404 for another user (admins too), unknown or malformed ids', async () => {
    const { db, api, post, get, owner, ownerKey } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id, 'pending_payment')
    const other = await newUser(db)
    const otherKey = (await newKey(db, other.id, { scopes: ['*'] })).key
    const admin = await newUser(db, { admin: true })
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
    const readOnly = (await newKey(db, owner.id, { scopes: ['subscriptions:read', 'nodes:read'] })).key
    const writeOnly = (await newKey(db, owner.id, { scopes: ['subscriptions:write'] })).key
    const inputs = [{ name: 'operator_label', value: 'mine' }]
    const path = `/api/v1/subscriptions/${subscriptionId}/inputs`

    const anonymous = await api.call('POST', path, { body: { inputs } })
    expect(anonymous.status).toBe(401)
    expect(isErrorBody(anonymous.body)).toBe(true)
    expect((await api.call('GET', path)).status).toBe(401)

    const scopeless = await post(subscriptionId, inputs, readOnly)
    expect(scopeless.status).toBe(403)
    expect(details(scopeless)).toContain('subscriptions:write')
    const cannotRead = await get(subscriptionId, writeOnly)
    expect(cannotRead.status).toBe(403)
    expect(details(cannotRead)).toContain('subscriptions:read')

    const foreign = await post(subscriptionId, inputs, otherKey)
    const unknown = await post(UNKNOWN_ID, inputs)
    const malformed = await post('not-a-subscription', inputs)
    const asAdmin = await post(subscriptionId, inputs, adminKey)
    for (const res of [foreign, unknown, malformed, asAdmin]) expect(res.status).toBe(404)
    expect(JSON.stringify(foreign.body).replaceAll(subscriptionId, '<id>')).toBe(JSON.stringify(unknown.body).replaceAll(UNKNOWN_ID, '<id>'))
    expect((await get(subscriptionId, otherKey)).status).toBe(404)
    expect(await storedInputs(db, subscriptionId)).toEqual([])

    expect((await post(subscriptionId, inputs, writeOnly)).status).toBe(200)
    // Reading: the owner, and an admin credential (text values included, secrets never).
    expect((await get(subscriptionId, readOnly)).status).toBe(200)
    const adminRead = await get(subscriptionId, adminKey)
    expect(adminRead.status).toBe(200)
    expect((adminRead.body as { inputs: Array<{ value: string }> }).inputs[0]?.value).toBe('mine')
    expect((await get(subscriptionId, ownerKey)).body).toEqual(adminRead.body)

    const doc = (await api.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, { security?: unknown }>> }
    expect(doc.paths['/api/v1/subscriptions/{id}/inputs']?.post?.security).toEqual([{ bearerAuth: ['subscriptions:write'] }])
    expect(doc.paths['/api/v1/subscriptions/{id}/inputs']?.get?.security).toEqual([{ bearerAuth: ['subscriptions:read'] }])
  })

  it('accepts inputs while pending_payment or active before provisioning; 409 once terminated, expiring, past provisioning or applied', async () => {
    const { db, post, owner } = await setup()
    const inputs = [{ name: 'operator_label', value: 'ok' }]
    const accepted = [
      await subscriptionOf(db, owner.id, 'pending_payment'),
      await subscriptionOf(db, owner.id, 'active'),
      await subscriptionOf(db, owner.id, 'active', 'provisioning'),
      // A failed provisioning left no live node: inputs may be corrected before a new one.
      await subscriptionOf(db, owner.id, 'active', 'failed'),
    ]
    for (const id of accepted) {
      const res = await post(id, inputs)
      expect(res.status, JSON.stringify(res.body)).toBe(200)
    }

    const refused: Array<[string, string]> = [
      [await subscriptionOf(db, owner.id, 'terminated'), 'is terminated'],
      [await subscriptionOf(db, owner.id, 'expiring', 'healthy'), 'is expiring'],
      [await subscriptionOf(db, owner.id, 'active', 'syncing'), 'in state syncing, past provisioning'],
      [await subscriptionOf(db, owner.id, 'active', 'healthy'), 'in state healthy, past provisioning'],
    ]
    const applied = await subscriptionOf(db, owner.id, 'active', 'provisioning')
    expect((await post(applied, inputs)).status).toBe(200)
    await db('provisioning_inputs').where({ subscription_id: applied }).update({ status: 'applied', applied_at: new Date() })
    refused.push([applied, 'were applied to its node'])

    for (const [id, reason] of refused) {
      const res = await post(id, [{ name: 'operator_label', value: 'changed' }])
      expect(res.status, reason).toBe(409)
      expect(isErrorBody(res.body)).toBe(true)
      expect(error(res)).toContain(reason)
    }
    expect((await storedInputs(db, applied)).map((r) => [r.value, r.status])).toEqual([['ok', 'applied']])
  })

  it('a secret input answers 503 while secrets are not initialised; text inputs still work', async () => {
    const { db, post, owner } = await setup({ secrets: false })
    const subscriptionId = await subscriptionOf(db, owner.id)
    const sealed = clientSeal(Buffer.from('x'), Buffer.from(nacl.box.keyPair().publicKey).toString('base64'))
    const res = await post(subscriptionId, [{ name: 'fee_recipient_key', sealed: sealed.toString('base64') }])
    expect(res.status).toBe(503)
    expect(error(res)).toBe('secrets are not initialised')
    expect(details(res)).toContain('nodeplane secrets init')
    expect((await post(subscriptionId, [{ name: 'operator_label', value: 'fine' }])).status).toBe(200)
  })

  it('missingRequiredInputs: required pre_provision inputs not provided, never the generated or chain-generated ones', async () => {
    const catalogue = withInputs((inputs) =>
      inputs.map((i) => (['operator_label', 'fee_recipient_key', 'validator_key', 'nodekey'].includes(i.name) ? { ...i, required: true } : i)),
    )
    const { db, post, get, owner, seal } = await setup({ catalogue })
    const subscriptionId = await subscriptionOf(db, owner.id, 'pending_payment')

    expect(await missingRequiredInputs(db, catalogue, subscriptionId)).toEqual(['operator_label', 'fee_recipient_key'])
    expect(await missingRequiredInputs(db, devnet, subscriptionId)).toEqual([])
    expect((await get(subscriptionId)).body).toMatchObject({ inputs: [], missing_required: ['operator_label', 'fee_recipient_key'] })

    expect((await post(subscriptionId, [{ name: 'fee_recipient_key', sealed: seal('k').toString('base64') }])).status).toBe(200)
    expect(await missingRequiredInputs(db, catalogue, subscriptionId)).toEqual(['operator_label'])
    expect((await post(subscriptionId, [{ name: 'operator_label', value: 'here' }])).status).toBe(200)
    expect(await missingRequiredInputs(db, catalogue, subscriptionId)).toEqual([])
    expect((await get(subscriptionId)).body).toMatchObject({ missing_required: [] })
    await expect(missingRequiredInputs(db, catalogue, UNKNOWN_ID)).rejects.toThrow(/not found/)
  })

  it('submitInputs checks ownership and writes in one transaction when called directly', async () => {
    const { db, masterKey, owner, seal } = await setup()
    const subscriptionId = await subscriptionOf(db, owner.id)
    const stranger = await newUser(db)
    const opener = async (blob: Uint8Array) => (await openWithServerKey(db, masterKey, blob)).plaintext
    const deps = { catalogue: devnet, serverKeyOpener: opener, now: new Date('2030-01-02T03:04:05.000Z') }

    await expect(submitInputs(db, { userId: stranger.id, subscriptionId, inputs: [{ name: 'operator_label', value: 'x' }] }, deps)).rejects.toMatchObject({ status: 404 })
    await expect(
      submitInputs(db, { userId: owner.id, subscriptionId, inputs: [{ name: 'fee_recipient_key', sealed: seal('s').toString('base64') }, { name: 'operator_label', value: '!' }] }, deps),
    ).rejects.toMatchObject({ status: 400 })
    expect(await storedInputs(db, subscriptionId)).toEqual([])

    const views = await submitInputs(db, { userId: owner.id, subscriptionId, inputs: [{ name: 'operator_label', value: 'direct' }] }, deps)
    expect(views).toEqual([
      { name: 'operator_label', type: 'text', phase: 'pre_provision', source: null, key_type: null, status: 'pending', value: 'direct', set_at: '2030-01-02T03:04:05.000Z', applied_at: null },
    ])
  })
})
