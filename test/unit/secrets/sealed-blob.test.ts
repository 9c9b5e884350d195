import nacl from 'tweetnacl'
import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { assertUsableRecipientKey, openBlob, sealBlob, SEALED_BLOB_OVERHEAD } from '../../../src/secrets/sealed-blob.js'

/**
 * A client written from the spec's sentence alone ("ephemeral public key 32 bytes, nonce 24
 * bytes, ciphertext"; X25519 + XSalsa20-Poly1305), byte by byte with tweetnacl, sharing no code
 * with the server's helper.
 */
const client = {
  seal(plaintext: Uint8Array, serverPublicKey: Uint8Array): Uint8Array {
    const ephemeral = nacl.box.keyPair()
    const nonce = nacl.randomBytes(24)
    const ciphertext = nacl.box(plaintext, nonce, serverPublicKey, ephemeral.secretKey)
    const out: number[] = []
    for (const b of ephemeral.publicKey) out.push(b)
    for (const b of nonce) out.push(b)
    for (const b of ciphertext) out.push(b)
    return Uint8Array.from(out)
  },
  open(blob: Uint8Array, secretKey: Uint8Array): Uint8Array | null {
    return nacl.box.open(blob.slice(56), blob.slice(32, 56), blob.slice(0, 32), secretKey)
  },
}

function thrown(fn: () => unknown): ValidationError | undefined {
  try {
    fn()
  } catch (err) {
    if (err instanceof ValidationError) return err
    throw err
  }
  return undefined
}

const text = (s: string) => new TextEncoder().encode(s)

describe('sealed blob (spec layout)', () => {
  it('opens what an independent client sealed, of any length', () => {
    const server = nacl.box.keyPair()
    for (const message of ['', 'x', 'validator mnemonic words go here', 'k'.repeat(10_000)]) {
      const blob = client.seal(text(message), server.publicKey)
      expect(blob.length).toBe(32 + 24 + 16 + text(message).length)
      expect(new TextDecoder().decode(openBlob(blob, server.secretKey))).toBe(message)
    }
  })

  it('seals what an independent client opens, with a fresh ephemeral key and nonce each time', () => {
    const recipient = nacl.box.keyPair()
    const a = sealBlob(text('secret'), recipient.publicKey)
    const b = sealBlob(text('secret'), recipient.publicKey)
    expect(a.length).toBe(SEALED_BLOB_OVERHEAD + 6)
    expect(new TextDecoder().decode(client.open(a, recipient.secretKey) as Uint8Array)).toBe('secret')
    expect(Buffer.from(a.subarray(0, 32)).equals(Buffer.from(b.subarray(0, 32)))).toBe(false)
    expect(Buffer.from(a.subarray(32, 56)).equals(Buffer.from(b.subarray(32, 56)))).toBe(false)
    // The ephemeral key is not the recipient's.
    expect(Buffer.from(a.subarray(0, 32)).equals(Buffer.from(recipient.publicKey))).toBe(false)
  })

  it('refuses a blob too short to hold the layout, naming the sizes', () => {
    const server = nacl.box.keyPair()
    for (const length of [0, 31, 56, 71]) {
      const err = thrown(() => openBlob(new Uint8Array(length), server.secretKey))
      expect(err).toBeInstanceOf(ValidationError)
      expect(err?.message).toBe('sealed box too short')
      expect(err?.details).toContain(`got ${length}`)
    }
  })

  it('refuses a blob with any byte altered (ephemeral key, nonce, tag, body)', () => {
    const server = nacl.box.keyPair()
    const blob = client.seal(text('0123456789'), server.publicKey)
    for (const at of [0, 31, 32, 55, 56, 71, 72, blob.length - 1]) {
      const altered = Uint8Array.from(blob)
      altered[at] = (altered[at] as number) ^ 0x01
      expect(() => openBlob(altered, server.secretKey), `byte ${at}`).toThrow(ValidationError)
    }
    expect(() => openBlob(blob.subarray(0, blob.length - 1), server.secretKey)).toThrow('sealed box does not open')
  })

  it('refuses a blob sealed to another key', () => {
    const server = nacl.box.keyPair()
    const other = nacl.box.keyPair()
    expect(() => openBlob(client.seal(text('x'), other.publicKey), server.secretKey)).toThrow('sealed box does not open')
  })

  it('refuses a libsodium-style sealed box (no nonce in it)', () => {
    const server = nacl.box.keyPair()
    const blob = client.seal(text('0123456789'), server.publicKey)
    const withoutNonce = Uint8Array.from([...blob.subarray(0, 32), ...blob.subarray(56)])
    expect(() => openBlob(withoutNonce, server.secretKey)).toThrow(ValidationError)
  })

  it('refuses recipient keys of the wrong size and small-order points', () => {
    expect(thrown(() => sealBlob(text('x'), new Uint8Array(31)))?.details).toBe('an X25519 public key is 32 bytes; got 31')
    const smallOrder = [
      new Uint8Array(32),
      Uint8Array.from([1, ...new Uint8Array(31)]),
      // Order-8 points (from the list in libsodium's ed25519_is_small_order / the X25519 paper).
      Buffer.from('e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800', 'hex'),
      Buffer.from('5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157', 'hex'),
      Buffer.from('ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', 'hex'),
    ]
    for (const key of smallOrder) {
      expect(thrown(() => assertUsableRecipientKey(new Uint8Array(key)))?.details).toContain('small-order point')
      expect(() => sealBlob(text('x'), new Uint8Array(key))).toThrow(ValidationError)
    }
    expect(() => assertUsableRecipientKey(nacl.box.keyPair().publicKey)).not.toThrow()
  })
})
