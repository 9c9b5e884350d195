import crypto from 'node:crypto'
import nacl from 'tweetnacl'
import { afterEach, describe, expect, it } from 'vitest'
import { UnavailableError, ValidationError } from '../../../src/errors.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import {
  activeServerPublicKey,
  ensureServerKeyPair,
  listServerKeys,
  openWithServerKey,
  rotateServerKeyPair,
  serverKeyId,
} from '../../../src/secrets/server-key.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'

const open: TestDatabase[] = []
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.destroy()))
})

/** A client following the spec's layout byte by byte (no server code). */
function clientSeal(message: string, serverPublicKeyBase64: string): Uint8Array {
  const serverKey = new Uint8Array(Buffer.from(serverPublicKeyBase64, 'base64'))
  const ephemeral = nacl.box.keyPair()
  const nonce = nacl.randomBytes(24)
  const box = nacl.box(new TextEncoder().encode(message), nonce, serverKey, ephemeral.secretKey)
  const blob = new Uint8Array(32 + 24 + box.length)
  blob.set(ephemeral.publicKey, 0)
  blob.set(nonce, 32)
  blob.set(box, 56)
  return blob
}

const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

describe.each(DIALECTS)('server X25519 key pairs on %s', (dialect) => {
  async function db() {
    const t = await createTestDatabase(dialect)
    open.push(t)
    return t.db
  }

  it('has none before init; ensure creates one once, with an id derived from the public key', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    expect(await activeServerPublicKey(knex)).toBeUndefined()
    await expect(openWithServerKey(knex, mk, new Uint8Array(100))).rejects.toBeInstanceOf(UnavailableError)

    const first = await ensureServerKeyPair(knex, mk)
    const second = await ensureServerKeyPair(knex, mk)
    expect(first.created).toBe(true)
    expect(second).toEqual({ publicKey: first.publicKey, created: false })
    expect(first.publicKey.algorithm).toBe('x25519-xsalsa20-poly1305')
    const publicKey = Buffer.from(first.publicKey.public_key, 'base64')
    expect(publicKey).toHaveLength(32)
    expect(first.publicKey.key_id).toBe(serverKeyId(publicKey))
    expect(await activeServerPublicKey(knex)).toEqual(first.publicKey)
    const rows = await knex('server_key_pairs').select('*')
    expect(rows).toHaveLength(1)
    expect(rows[0].master_key_id).toBe(mk.id)
    expect(String(rows[0].wrapped_secret_key).startsWith(`local:v1:${mk.id}:`)).toBe(true)
  })

  it('opens what a client sealed to the active key', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const { publicKey } = await ensureServerKeyPair(knex, mk)
    const opened = await openWithServerKey(knex, mk, clientSeal('my validator key', publicKey.public_key))
    expect(decode(opened.plaintext)).toBe('my validator key')
    expect(opened.keyId).toBe(publicKey.key_id)
  })

  it('rotation makes a new key active and keeps the old one, so inputs sealed to it still open', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const old = (await ensureServerKeyPair(knex, mk)).publicKey
    const sealedToOld = clientSeal('sealed before the rotation', old.public_key)

    const rotated = await rotateServerKeyPair(knex, mk)
    expect(rotated.retired).toEqual([old.key_id])
    expect(rotated.publicKey.key_id).not.toBe(old.key_id)
    expect(await activeServerPublicKey(knex)).toEqual(rotated.publicKey)
    const again = await rotateServerKeyPair(knex, mk, new Date(Date.now() + 1000))
    expect(await activeServerPublicKey(knex)).toEqual(again.publicKey)

    const keys = await listServerKeys(knex)
    expect(keys.map((k) => k.key_id)).toEqual([again.publicKey.key_id, rotated.publicKey.key_id, old.key_id])
    expect(keys.map((k) => k.retired_at === null)).toEqual([true, false, false])

    const fromOld = await openWithServerKey(knex, mk, sealedToOld)
    expect(decode(fromOld.plaintext)).toBe('sealed before the rotation')
    expect(fromOld.keyId).toBe(old.key_id)
    const fromNew = await openWithServerKey(knex, mk, clientSeal('sealed after', again.publicKey.public_key))
    expect(fromNew.keyId).toBe(again.publicKey.key_id)
  })

  it('two active keys (a race) settle to the newest on the next rotation, and both keys still open', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    // What a race leaves: two active rows (inserted directly, as two rotations would).
    const a = await rotateServerKeyPair(knex, mk)
    const bPair = nacl.box.keyPair()
    await knex('server_key_pairs').insert({
      id: serverKeyId(bPair.publicKey),
      public_key: Buffer.from(bPair.publicKey).toString('base64'),
      master_key_id: mk.id,
      wrapped_secret_key: await mk.wrap(bPair.secretKey),
      created_at: new Date(Date.now() + 5),
      retired_at: null,
    })
    const active = await activeServerPublicKey(knex)
    expect(active?.key_id).toBe(serverKeyId(bPair.publicKey))
    const settled = await rotateServerKeyPair(knex, mk, new Date(Date.now() + 10))
    expect(settled.retired.sort()).toEqual([a.publicKey.key_id, serverKeyId(bPair.publicKey)].sort())
    expect((await listServerKeys(knex)).filter((k) => k.retired_at === null)).toHaveLength(1)
    for (const key of [a.publicKey.public_key, Buffer.from(bPair.publicKey).toString('base64')]) {
      expect(decode((await openWithServerKey(knex, mk, clientSeal('either', key))).plaintext)).toBe('either')
    }
  })

  it('concurrent ensure calls agree on one active key', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const results = await Promise.all([ensureServerKeyPair(knex, mk), ensureServerKeyPair(knex, mk), ensureServerKeyPair(knex, mk)])
    const active = await activeServerPublicKey(knex)
    for (const r of results) expect(r.publicKey).toEqual(active)
    expect((await listServerKeys(knex)).filter((k) => k.retired_at === null)).toHaveLength(1)
  })

  it('refuses what does not open: another recipient, altered, too short; another master key cannot unwrap', async () => {
    const knex = await db()
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const { publicKey } = await ensureServerKeyPair(knex, mk)
    const stranger = Buffer.from(nacl.box.keyPair().publicKey).toString('base64')
    await expect(openWithServerKey(knex, mk, clientSeal('x', stranger))).rejects.toThrow('sealed box does not open')
    const altered = clientSeal('x', publicKey.public_key)
    altered[60] = (altered[60] as number) ^ 1
    await expect(openWithServerKey(knex, mk, altered)).rejects.toBeInstanceOf(ValidationError)
    await expect(openWithServerKey(knex, mk, new Uint8Array(40))).rejects.toThrow('sealed box too short')
    const otherMaster = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    await expect(openWithServerKey(knex, otherMaster, clientSeal('x', publicKey.public_key))).rejects.toBeInstanceOf(KeyMaterialError)
  })
})
