import crypto from 'node:crypto'
import { SigningKey, Wallet } from 'ethers'
import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { DataKey } from '../../../src/secrets/data-keys.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import { decryptKeyMaterial, derivePublicKey, encryptKeyMaterial, ethereumAddress, generateKey } from '../../../src/secrets/node-keys.js'

const NODE_A = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'
const NODE_B = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c'

describe('key generation', () => {
  it('ed25519: 32-byte seed and raw 32-byte public key that verify each other', () => {
    const key = generateKey('ed25519')
    expect(key.privateKey).toHaveLength(32)
    expect(key.publicKey).toMatch(/^[0-9a-f]{64}$/)
    const privateKey = crypto.createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', d: key.privateKey.toString('base64url'), x: Buffer.from(key.publicKey, 'hex').toString('base64url') }, format: 'jwk' })
    const publicKey = crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey, 'hex').toString('base64url') }, format: 'jwk' })
    const signature = crypto.sign(null, Buffer.from('block'), privateKey)
    expect(crypto.verify(null, Buffer.from('block'), publicKey, signature)).toBe(true)
    expect(generateKey('ed25519').publicKey).not.toBe(key.publicKey)
  })

  it('ed25519: derives the RFC 8032 test vector public key', () => {
    const seed = Buffer.from('9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60', 'hex')
    expect(derivePublicKey('ed25519', seed)).toBe('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a')
  })

  it('secp256k1: 32-byte scalar, compressed public key and Ethereum address agreeing with ethers', () => {
    const key = generateKey('secp256k1')
    expect(key.privateKey).toHaveLength(32)
    expect(key.publicKey).toMatch(/^0[23][0-9a-f]{64}$/)
    const hex = `0x${key.privateKey.toString('hex')}`
    expect(`0x${key.publicKey}`).toBe(SigningKey.computePublicKey(hex, true))
    expect(key.address).toBe(new Wallet(hex).address)
    expect(ethereumAddress(key.publicKey)).toBe(key.address)
    expect(ethereumAddress(SigningKey.computePublicKey(hex, false))).toBe(key.address)
  })

  it('refuses private keys of the wrong size, and secp256k1 scalars outside the curve order', () => {
    expect(() => derivePublicKey('ed25519', new Uint8Array(31))).toThrow(ValidationError)
    expect(() => derivePublicKey('secp256k1', new Uint8Array(32))).toThrow(ValidationError)
    const order = Buffer.from('fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141', 'hex')
    expect(() => derivePublicKey('secp256k1', order)).toThrow(ValidationError)
  })
})

describe('key material encryption (AES-256-GCM under the data key)', () => {
  const bytes = crypto.randomBytes(32)
  const dataKey = new DataKey(NODE_A, bytes)

  it('round-trips, as base64 of iv (12) || tag (16) || ciphertext', () => {
    const secret = crypto.randomBytes(32)
    const encoded = encryptKeyMaterial(dataKey, 'validator', secret)
    expect(Buffer.from(encoded, 'base64')).toHaveLength(12 + 16 + 32)
    expect(decryptKeyMaterial(dataKey, 'validator', encoded).equals(secret)).toBe(true)
    expect(encryptKeyMaterial(dataKey, 'validator', secret)).not.toBe(encoded)
  })

  it('binds the ciphertext to its key name and node: moved elsewhere it does not decrypt', () => {
    const encoded = encryptKeyMaterial(dataKey, 'validator', crypto.randomBytes(32))
    expect(() => decryptKeyMaterial(dataKey, 'operator', encoded)).toThrow(KeyMaterialError)
    // Same key bytes, another node: the associated data still differs.
    expect(() => decryptKeyMaterial(new DataKey(NODE_B, bytes), 'validator', encoded)).toThrow(KeyMaterialError)
    expect(() => decryptKeyMaterial(new DataKey(NODE_A, crypto.randomBytes(32)), 'validator', encoded)).toThrow(KeyMaterialError)
  })

  it('detects truncation and altered bytes', () => {
    const encoded = Buffer.from(encryptKeyMaterial(dataKey, 'k', Buffer.from('secret material')), 'base64')
    expect(() => decryptKeyMaterial(dataKey, 'k', encoded.subarray(0, 20).toString('base64'))).toThrow(KeyMaterialError)
    for (const at of [0, 12, 28, encoded.length - 1]) {
      const altered = Buffer.from(encoded)
      altered[at] = (altered[at] as number) ^ 1
      expect(() => decryptKeyMaterial(dataKey, 'k', altered.toString('base64')), `byte ${at}`).toThrow(KeyMaterialError)
    }
  })

  it('a data key never shows its bytes when logged, serialised or inspected', async () => {
    const { inspect } = await import('node:util')
    const shown = [JSON.stringify({ dataKey }), String(dataKey), inspect(dataKey, { showHidden: true, depth: 5 }), inspect({ dataKey })].join(' ')
    expect(shown).not.toContain(bytes.toString('hex'))
    expect(shown).not.toContain(bytes.toString('base64'))
    expect(shown).toContain(NODE_A)
  })
})
