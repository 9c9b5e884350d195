/**
 * Legacy wallet sign-in (GET /auth/nonce, POST /auth/verify) with a real ethers Wallet and a
 * real tweetnacl Ed25519 key: nonce shape, single use, expiry (injected clock), wrong address,
 * bad signature, malformed input, user creation. Both databases.
 */
import bs58 from 'bs58'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { findUserByWalletAddress } from '../../../src/auth/users.js'
import { DIALECTS } from '../../helpers/db.js'
import { getJson, Resources } from '../http/harness.js'
import { SiweMessage } from 'siwe'
import { postJson, randomWallet, SIWE, startTestAuthServer, TestClock } from './auth-server-support.js'

interface NonceBody {
  nonce: string
  address: string
  expires_at: string
  message: string
}

function solanaWallet() {
  const keys = nacl.sign.keyPair()
  return {
    address: bs58.encode(keys.publicKey),
    publicKey: keys.publicKey,
    sign: (message: string) => bs58.encode(nacl.sign.detached(new TextEncoder().encode(message), keys.secretKey)),
  }
}

describe.each(DIALECTS)('auth server wallet sign-in on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  async function setup(mode: 'both' | 'siwe' | 'idp' = 'siwe') {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const server = await startTestAuthServer(resources, t.db, { clock, settings: { AUTH_PROVIDER: mode } })
    const nonce = async (address: string) => {
      const res = await getJson(`${server.url}/auth/nonce?address=${encodeURIComponent(address)}`)
      expect(res.status).toBe(200)
      return res.body as NonceBody
    }
    return { db: t.db, clock, url: server.url, nonce, logs: server.logs }
  }

  it('issues a 64-character single-use nonce and a message naming the address, valid 5 minutes', async () => {
    const { clock, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address.toLowerCase())
    expect(issued.nonce).toMatch(/^[A-Za-z0-9]{64}$/)
    expect(issued.address).toBe(wallet.address) // EIP-55
    expect(issued.message).toContain(issued.nonce)
    expect(issued.message).toContain(wallet.address)
    expect(Date.parse(issued.expires_at) - clock.now().getTime()).toBe(5 * 60_000)
    const second = await nonce(wallet.address)
    expect(second.nonce).not.toBe(issued.nonce)
  })

  it('signs in an Ethereum wallet (EIP-191), creating the user once; the same message cannot be replayed', async () => {
    const { db, url, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const signature = await wallet.signMessage(issued.message)

    const res = await postJson(`${url}/auth/verify`, { address: wallet.address.toLowerCase(), message: issued.message, signature })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ token_type: 'Bearer', expires_in: 900, access_token: expect.any(String), refresh_token: expect.stringMatching(/^npr_/) })
    expect(res.headers.get('cache-control')).toBe('no-store')

    const user = await findUserByWalletAddress(db, wallet.address.toUpperCase().replace('0X', '0x'))
    expect(user).toMatchObject({ wallet_address: wallet.address, wallet_type: 'ethereum', email: null, external_auth_id: null, is_admin: false })
    const row = (await db('users').where({ id: user?.id }).first()) as { wallet_public_key: Buffer }
    expect(Buffer.from(row.wallet_public_key).toString('hex')).toBe(wallet.signingKey.publicKey.slice(2))

    const replay = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature })
    expect(replay.status).toBe(401)
    expect(replay.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('already used') })

    // A second sign-in finds the same user.
    const next = await nonce(wallet.address)
    const again = await postJson(`${url}/auth/verify`, { address: wallet.address, message: next.message, signature: await wallet.signMessage(next.message) })
    expect(again.status).toBe(200)
    expect(Number((await db('users').count({ n: '*' }).first())?.n)).toBe(1)
  })

  it('issues a Sign-In with Ethereum (EIP-4361) message bound to the configured domain, URI and chain', async () => {
    const { clock, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const parsed = new SiweMessage(issued.message)
    expect(parsed).toMatchObject({
      domain: SIWE.domain,
      address: wallet.address,
      uri: SIWE.uri,
      version: '1',
      chainId: SIWE.ethereumChainId,
      nonce: issued.nonce,
      issuedAt: clock.now().toISOString(),
      expirationTime: issued.expires_at,
    })
    const solana = solanaWallet()
    const forSolana = await nonce(solana.address)
    expect(forSolana.message.split('\n')).toEqual([
      `${SIWE.domain} wants you to sign in with your Solana account:`,
      solana.address,
      '',
      expect.stringContaining('Sign in to nodeplane'),
      '',
      `URI: ${SIWE.uri}`,
      'Version: 1',
      `Chain ID: ${SIWE.solanaChain}`,
      `Nonce: ${forSolana.nonce}`,
      `Issued At: ${clock.now().toISOString()}`,
      `Expiration Time: ${forSolana.expires_at}`,
    ])
  })

  it('refuses a relayed nonce signed for another domain, another URI or chain, altered times, with 401; the nonce stays usable', async () => {
    const { db, url, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const parsed = new SiweMessage(issued.message)
    const variant = (change: Partial<SiweMessage>) => new SiweMessage({ ...parsed, ...change }).prepareMessage()
    const cases: Array<[string, string, RegExp]> = [
      // A phishing site relays our nonce and has the victim sign a message for its own domain.
      ['another domain', variant({ domain: 'nodeplane-login.evil.test' }), /domain "nodeplane-login.evil.test"/],
      ['another URI', variant({ uri: 'https://evil.test/login' }), /URI "https:\/\/evil.test\/login"/],
      ['another chain id', variant({ chainId: 5 }), /chain id 5/],
      ['a later expiry', variant({ expirationTime: new Date(Date.parse(issued.expires_at) + 3_600_000).toISOString() }), /Expiration Time/],
      ['another issue time', variant({ issuedAt: new Date(Date.parse(parsed.issuedAt as string) - 1000).toISOString() }), /Issued At/],
    ]
    for (const [what, message, details] of cases) {
      const res = await postJson(`${url}/auth/verify`, { address: wallet.address, message, signature: await wallet.signMessage(message) })
      expect(res.status, what).toBe(401)
      expect(String(res.body.details), what).toMatch(details)
    }
    // Free text with the nonce in it, the old accepted form, is not a sign-in message.
    const freeText = `please sign ${issued.nonce} for ${wallet.address}`
    const free = await postJson(`${url}/auth/verify`, { address: wallet.address, message: freeText, signature: await wallet.signMessage(freeText) })
    expect(free.status).toBe(400)
    expect(String(free.body.details)).toContain('body.message')
    expect(await db('users').count({ n: '*' }).first()).toMatchObject({ n: expect.anything() })
    expect(Number(((await db('users').count({ n: '*' }).first()) as { n: number | string }).n)).toBe(0)

    // The genuine message still signs in, once.
    const ok = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature: await wallet.signMessage(issued.message) })
    expect(ok.status).toBe(200)
    const reused = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature: await wallet.signMessage(issued.message) })
    expect(reused.status).toBe(401)
    expect(reused.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('already used') })
  })

  it('refuses a Solana message for another domain, and one not in the structured format', async () => {
    const { url, nonce } = await setup()
    const wallet = solanaWallet()
    const issued = await nonce(wallet.address)
    const relayed = issued.message.replace(`${SIWE.domain} wants you`, 'evil.test wants you')
    const res = await postJson(`${url}/auth/verify`, { address: wallet.address, message: relayed, signature: wallet.sign(relayed) })
    expect(res.status).toBe(401)
    expect(String(res.body.details)).toContain('domain "evil.test"')
    const extra = `${issued.message}\nResources: x`
    expect((await postJson(`${url}/auth/verify`, { address: wallet.address, message: extra, signature: wallet.sign(extra) })).status).toBe(400)
    const ok = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature: wallet.sign(issued.message) })
    expect(ok.status).toBe(200)
  })

  it('signs in a Solana wallet (Ed25519 over the message, base58)', async () => {
    const { db, url, nonce } = await setup('both')
    const wallet = solanaWallet()
    const issued = await nonce(wallet.address)
    expect(issued.address).toBe(wallet.address)
    const res = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature: wallet.sign(issued.message) })
    expect(res.status).toBe(200)
    const user = await findUserByWalletAddress(db, wallet.address)
    expect(user).toMatchObject({ wallet_address: wallet.address, wallet_type: 'solana' })
    const row = (await db('users').where({ id: user?.id }).first()) as { wallet_public_key: Buffer }
    expect(Buffer.from(row.wallet_public_key).equals(Buffer.from(wallet.publicKey))).toBe(true)
  })

  it('refuses an expired nonce with 401 (clock moved past 5 minutes)', async () => {
    const { clock, url, nonce, db } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const signature = await wallet.signMessage(issued.message)
    clock.advance(5 * 60_000)
    const res = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature })
    expect(res.status).toBe(401)
    expect(res.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('expired') })
    expect(Number((await db('users').count({ n: '*' }).first())?.n)).toBe(0)
  })

  it('accepts a nonce just before it expires', async () => {
    const { clock, url, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    clock.advance(5 * 60_000 - 1)
    const res = await postJson(`${url}/auth/verify`, { address: wallet.address, message: issued.message, signature: await wallet.signMessage(issued.message) })
    expect(res.status).toBe(200)
  })

  it('refuses a nonce issued for another address, and a signature by another key, with 401', async () => {
    const { url, nonce, db } = await setup()
    const alice = randomWallet()
    const mallory = randomWallet()

    // Mallory uses a nonce issued for Alice, in a message of her own.
    const forAlice = await nonce(alice.address)
    const malloryMessage = forAlice.message.replace(alice.address, mallory.address)
    const wrongAddress = await postJson(`${url}/auth/verify`, { address: mallory.address, message: malloryMessage, signature: await mallory.signMessage(malloryMessage) })
    expect(wrongAddress.status).toBe(401)
    expect(wrongAddress.body).toMatchObject({ error: 'invalid nonce', details: expect.stringContaining('another address') })

    // Mallory signs Alice's challenge with her own key and claims to be Alice.
    const forged = await postJson(`${url}/auth/verify`, { address: alice.address, message: forAlice.message, signature: await mallory.signMessage(forAlice.message) })
    expect(forged.status).toBe(401)
    expect(forged.body).toMatchObject({ error: 'wallet signature does not match the address' })

    // The nonce survived both attempts: Alice can still use it.
    const alices = await postJson(`${url}/auth/verify`, { address: alice.address, message: forAlice.message, signature: await alice.signMessage(forAlice.message) })
    expect(alices.status).toBe(200)
    expect(await findUserByWalletAddress(db, mallory.address)).toBeUndefined()
  })

  it('refuses an unknown nonce with 401 and malformed input with 400', async () => {
    const { url, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const made = issued.message.replace(issued.nonce, 'A'.repeat(64))
    const unknown = await postJson(`${url}/auth/verify`, { address: wallet.address, message: made, signature: await wallet.signMessage(made) })
    expect(unknown.status).toBe(401)

    const cases: Array<Record<string, unknown>> = [
      { address: wallet.address, message: issued.message }, // no signature
      { address: 'not-an-address', message: issued.message, signature: '0x00' },
      { address: wallet.address, message: issued.message, signature: '0x1234' }, // not 65 bytes
      { address: wallet.address, message: 'hello without a nonce', signature: await wallet.signMessage('hello') },
    ]
    for (const body of cases) {
      const res = await postJson(`${url}/auth/verify`, body)
      expect({ body, status: res.status }).toEqual({ body, status: 400 })
      expect(res.body).toMatchObject({ error: expect.any(String), details: expect.any(String) })
    }
    const malformedJson = await fetch(`${url}/auth/verify`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"address":' })
    expect(malformedJson.status).toBe(400)
    expect(await malformedJson.json()).toMatchObject({ error: 'malformed JSON' })
    const notJson = await fetch(`${url}/auth/verify`, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: 'hello' })
    expect(notJson.status).toBe(415)
    const badNonceRequest = await getJson(`${url}/auth/nonce?address=0x123`)
    expect(badNonceRequest.status).toBe(400)
    const noAddress = await getJson(`${url}/auth/nonce`)
    expect(noAddress.status).toBe(400)
  })

  it('two concurrent sign-ins with one signed message: exactly one succeeds', async () => {
    const { url, nonce } = await setup()
    const wallet = randomWallet()
    const issued = await nonce(wallet.address)
    const body = { address: wallet.address, message: issued.message, signature: await wallet.signMessage(issued.message) }
    const results = await Promise.all([1, 2, 3].map(() => postJson(`${url}/auth/verify`, body)))
    expect(results.map((r) => r.status).sort()).toEqual([200, 401, 401])
  })

  it('in mode idp the wallet routes answer 404', async () => {
    const { url } = await setup('idp')
    expect((await getJson(`${url}/auth/nonce?address=${randomWallet().address}`)).status).toBe(404)
    expect((await postJson(`${url}/auth/verify`, { address: 'x', message: 'y', signature: 'z' })).status).toBe(404)
    expect((await postJson(`${url}/auth/refresh`, { refresh_token: 'npr_x' })).status).toBe(404)
    expect((await getJson(`${url}/.well-known/jwks.json`)).status).toBe(404)
    // Logout stays, so tokens from an earlier mode can still be revoked.
    expect((await postJson(`${url}/auth/logout`, { refresh_token: 'npr_x' })).status).toBe(204)
  })
})
