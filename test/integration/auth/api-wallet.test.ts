import bs58 from 'bs58'
import { getBytes, SigningKey, Wallet } from 'ethers'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { SiweMessage } from 'siwe'
import { DEFAULT_SIGN_IN_BINDING } from '../../../src/auth/sign-in-message.js'
import { findUserByWalletAddress } from '../../../src/auth/users.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const PATH = '/api/v1/wallet/register-public-key'

/** The registration message the API issues to `key`'s user for `address` (POST /api/v1/wallet/nonce). */
async function challenge(api: AuthApi, key: string, address: string): Promise<string> {
  const res = await api.call('POST', '/api/v1/wallet/nonce', { bearer: key, body: { address } })
  expect(res.status, JSON.stringify(res.body)).toBe(200)
  expect(res.headers.get('cache-control')).toBe('no-store')
  return (res.body as { message: string }).message
}

function solanaWallet() {
  const pair = nacl.sign.keyPair()
  return {
    address: bs58.encode(pair.publicKey),
    publicKey: pair.publicKey,
    sign: (text: string) => bs58.encode(nacl.sign.detached(new TextEncoder().encode(text), pair.secretKey)),
  }
}

async function caller(db: Db) {
  const user = await newUser(db)
  const { key } = await newKey(db, user.id, { scopes: ['nodes:read'] })
  return { user, key }
}

async function register(api: AuthApi, key: string, body: unknown) {
  return api.call('POST', PATH, { bearer: key, body })
}

function bytesOf(value: unknown): Uint8Array {
  return new Uint8Array(value as Buffer)
}

describe.each(DIALECTS)('wallet registration on %s', (dialect) => {
  it('registers an Ethereum wallet by a personal_sign signature, stored EIP-55', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const alice = await caller(db)
    const bob = await caller(db)
    const wallet = Wallet.createRandom()
    // The message may name the address in any case; what is stored is the checksummed form.
    const text = await challenge(api, alice.key, wallet.address.toLowerCase())

    const ok = await register(api, alice.key, { message: text, signature: await wallet.signMessage(text) })
    expect(ok.status, JSON.stringify(ok.body)).toBe(200)
    expect(ok.body).toEqual({ status: 'ok', address: wallet.address })
    const row = await db('users').where({ id: alice.user.id }).first()
    expect(row.wallet_address).toBe(wallet.address)
    expect(row.wallet_type).toBe('ethereum')
    expect(bytesOf(row.wallet_public_key)).toEqual(getBytes(new SigningKey(wallet.privateKey).publicKey))
    expect((await findUserByWalletAddress(db, wallet.address.toLowerCase()))?.id).toBe(alice.user.id)
    expect((await findUserByWalletAddress(db, wallet.address.toUpperCase().replace('0X', '0x')))?.id).toBe(alice.user.id)
    expect((await api.call('GET', '/api/v1/me', { bearer: alice.key })).body).toMatchObject({ wallet_address: wallet.address, wallet_type: 'ethereum' })

    // The same signed message again: its nonce is used up.
    const reused = await register(api, alice.key, { message: text, signature: await wallet.signMessage(text) })
    expect(reused.status).toBe(401)
    expect(reused.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('already used') })
    // Again by the same user with a fresh challenge: harmless.
    const again = await challenge(api, alice.key, wallet.address)
    expect((await register(api, alice.key, { message: again, signature: await wallet.signMessage(again) })).status).toBe(200)

    // Another user with the same wallet: 409, even with a correct signature of their own message.
    const bobText = await challenge(api, bob.key, wallet.address)
    const taken = await register(api, bob.key, { message: bobText, signature: await wallet.signMessage(bobText) })
    expect(taken.status).toBe(409)
    expect(isErrorBody(taken.body)).toBe(true)

    // Message without the caller's id (here: alice's message replayed by bob).
    const replay = await register(api, bob.key, { message: text, signature: await wallet.signMessage(text) })
    expect(replay.status).toBe(400)
    expect((replay.body as { details: string }).details).toContain(`body.message: must contain your user id ${bob.user.id}`)

    // Signed by a different key than the address the message names.
    const other = Wallet.createRandom()
    const claimed = await challenge(api, bob.key, other.address)
    const forged = await register(api, bob.key, { message: claimed, signature: await wallet.signMessage(claimed) })
    expect(forged.status).toBe(401)
    expect(forged.body).toEqual({ error: 'wallet signature does not match the address', details: 'the signature was not made by the address the message names' })

    // Malformed input: 400 naming the field.
    for (const [body, field] of [
      [{ message: claimed, signature: '0x1234' }, 'body.signature'],
      [{ message: claimed, signature: `0x${'00'.repeat(65)}` }, 'body.signature'],
      [{ message: `hello ${bob.user.id}`, signature: await other.signMessage(`hello ${bob.user.id}`) }, 'body.message'],
      [{ message: claimed }, 'body.signature'],
      [{ message: 'x'.repeat(5000), signature: '0x' }, 'body.message'],
    ] as const) {
      const res = await register(api, bob.key, body)
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400)
      expect((res.body as { details: string }).details).toContain(field)
    }
    expect((await db('users').where({ id: bob.user.id }).first()).wallet_address).toBeNull()
  })

  it('registers a Solana wallet by an Ed25519 signature', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const alice = await caller(db)
    const bob = await caller(db)
    const wallet = solanaWallet()
    const text = await challenge(api, alice.key, wallet.address)

    const ok = await register(api, alice.key, { message: text, signature: wallet.sign(text) })
    expect(ok.status, JSON.stringify(ok.body)).toBe(200)
    expect(ok.body).toEqual({ status: 'ok', address: wallet.address })
    const row = await db('users').where({ id: alice.user.id }).first()
    expect(row).toMatchObject({ wallet_address: wallet.address, wallet_type: 'solana' })
    expect(bytesOf(row.wallet_public_key)).toEqual(wallet.publicKey)

    const other = solanaWallet()
    const claimed = await challenge(api, bob.key, other.address)
    const forged = await register(api, bob.key, { message: claimed, signature: wallet.sign(claimed) })
    expect(forged.status).toBe(401)
    // Anything added to the structured message makes it no registration message at all.
    const tampered = await register(api, bob.key, { message: `${claimed}!`, signature: other.sign(claimed) })
    expect(tampered.status).toBe(400)
    expect((await register(api, bob.key, { message: claimed, signature: 'not base58 0OIl' })).status).toBe(400)

    const bobText = await challenge(api, bob.key, wallet.address)
    expect((await register(api, bob.key, { message: bobText, signature: wallet.sign(bobText) })).status).toBe(409)

    // A new wallet replaces the caller's previous one.
    const next = solanaWallet()
    const nextText = await challenge(api, alice.key, next.address)
    expect((await register(api, alice.key, { message: nextText, signature: next.sign(nextText) })).status).toBe(200)
    expect((await db('users').where({ id: alice.user.id }).first()).wallet_address).toBe(next.address)
  })

  it('refuses a registration message for another domain, URI or chain, an expired nonce or another user\'s nonce; nothing is written', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const alice = await caller(db)
    const bob = await caller(db)
    const wallet = Wallet.createRandom()
    const text = await challenge(api, alice.key, wallet.address)
    const parsed = new SiweMessage(text)
    expect(parsed).toMatchObject({ domain: DEFAULT_SIGN_IN_BINDING.domain, uri: DEFAULT_SIGN_IN_BINDING.uri, chainId: DEFAULT_SIGN_IN_BINDING.ethereumChainId, address: wallet.address })
    expect(parsed.statement).toContain(alice.user.id)
    const variant = (change: Partial<SiweMessage>) => new SiweMessage({ ...parsed, ...change }).prepareMessage()
    for (const [what, forged, details] of [
      ['domain', variant({ domain: 'evil.test' }), 'domain "evil.test"'],
      ['uri', variant({ uri: 'https://evil.test' }), 'URI "https://evil.test"'],
      ['chain', variant({ chainId: 10 }), 'chain id 10'],
    ] as const) {
      const res = await register(api, alice.key, { message: forged, signature: await wallet.signMessage(forged) })
      expect(res.status, what).toBe(401)
      expect((res.body as { details: string }).details, what).toContain(details)
    }
    // Bob cannot use a challenge issued to Alice even if it named him: the nonce is Alice's.
    const bobs = variant({ statement: `Register this wallet with nodeplane user ${bob.user.id}.` })
    const stolen = await register(api, bob.key, { message: bobs, signature: await wallet.signMessage(bobs) })
    expect(stolen.status).toBe(401)
    expect(stolen.body).toMatchObject({ error: 'invalid nonce', details: 'the nonce was issued to another user' })

    api.clock.advance(5 * 60_000)
    const late = await register(api, alice.key, { message: text, signature: await wallet.signMessage(text) })
    expect(late.status).toBe(401)
    expect(late.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('expired') })
    expect((await db('users').whereNotNull('wallet_address').select('id')) as unknown[]).toEqual([])
  })

  it('gives an address to exactly one of two users racing for it', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const wallet = Wallet.createRandom()
    const callers = await Promise.all([caller(db), caller(db), caller(db)])
    const results = await Promise.all(
      callers.map(async (c) => {
        const text = await challenge(api, c.key, wallet.address)
        return register(api, c.key, { message: text, signature: await wallet.signMessage(text) })
      }),
    )
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409])
  })
})
