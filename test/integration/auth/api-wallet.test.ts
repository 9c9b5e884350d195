import bs58 from 'bs58'
import { getBytes, SigningKey, Wallet } from 'ethers'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { findUserByWalletAddress } from '../../../src/auth/users.js'
import type { Db } from '../../../src/db/knex.js'
import { DIALECTS } from '../../helpers/db.js'
import { Resources } from '../http/harness.js'
import { isErrorBody, newKey, newUser, startAuthApi, type AuthApi } from './api-harness.js'

const resources = new Resources()
afterEach(() => resources.cleanup())

const PATH = '/api/v1/wallet/register-public-key'

const message = (address: string, userId: string) => `nodeplane wallet registration\nAddress: ${address}\nUser: ${userId}\nIssued: 2030-01-01T00:00:00Z`

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
    const text = message(wallet.address.toLowerCase(), alice.user.id)

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

    // Again by the same user: harmless.
    expect((await register(api, alice.key, { message: text, signature: await wallet.signMessage(text) })).status).toBe(200)

    // Another user with the same wallet: 409, even with a correct signature of their own message.
    const bobText = message(wallet.address, bob.user.id)
    const taken = await register(api, bob.key, { message: bobText, signature: await wallet.signMessage(bobText) })
    expect(taken.status).toBe(409)
    expect(isErrorBody(taken.body)).toBe(true)

    // Message without the caller's id (here: alice's message replayed by bob).
    const replay = await register(api, bob.key, { message: text, signature: await wallet.signMessage(text) })
    expect(replay.status).toBe(400)
    expect((replay.body as { details: string }).details).toContain(`body.message: must contain your user id ${bob.user.id}`)

    // Signed by a different key than the address the message names.
    const other = Wallet.createRandom()
    const claimed = message(other.address, bob.user.id)
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
    const text = message(wallet.address, alice.user.id)

    const ok = await register(api, alice.key, { message: text, signature: wallet.sign(text) })
    expect(ok.status, JSON.stringify(ok.body)).toBe(200)
    expect(ok.body).toEqual({ status: 'ok', address: wallet.address })
    const row = await db('users').where({ id: alice.user.id }).first()
    expect(row).toMatchObject({ wallet_address: wallet.address, wallet_type: 'solana' })
    expect(bytesOf(row.wallet_public_key)).toEqual(wallet.publicKey)

    const other = solanaWallet()
    const claimed = message(other.address, bob.user.id)
    const forged = await register(api, bob.key, { message: claimed, signature: wallet.sign(claimed) })
    expect(forged.status).toBe(401)
    const tampered = await register(api, bob.key, { message: `${claimed}!`, signature: other.sign(claimed) })
    expect(tampered.status).toBe(401)
    expect((await register(api, bob.key, { message: claimed, signature: 'not base58 0OIl' })).status).toBe(400)

    const bobText = message(wallet.address, bob.user.id)
    expect((await register(api, bob.key, { message: bobText, signature: wallet.sign(bobText) })).status).toBe(409)

    // A new wallet replaces the caller's previous one.
    const next = solanaWallet()
    const nextText = message(next.address, alice.user.id)
    expect((await register(api, alice.key, { message: nextText, signature: next.sign(nextText) })).status).toBe(200)
    expect((await db('users').where({ id: alice.user.id }).first()).wallet_address).toBe(next.address)
  })

  it('gives an address to exactly one of two users racing for it', async () => {
    const { db } = await resources.database(dialect)
    const api = await startAuthApi(resources, db)
    const wallet = Wallet.createRandom()
    const callers = await Promise.all([caller(db), caller(db), caller(db)])
    const results = await Promise.all(
      callers.map(async (c) => {
        const text = message(wallet.address, c.user.id)
        return register(api, c.key, { message: text, signature: await wallet.signMessage(text) })
      }),
    )
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409])
  })
})
