/**
 * The spec's sealed-box layout for secrets crossing the public API (secret inputs sent by
 * clients, exported keys sent back): one byte string
 *
 *   ephemeral public key (32) || nonce (24) || ciphertext (plaintext length + 16)
 *
 * where ciphertext = NaCl `box` (X25519 + XSalsa20-Poly1305) of the plaintext, from the ephemeral
 * secret key to the recipient's public key. Not libsodium's `crypto_box_seal`, whose nonce is
 * derived and not sent: clients must follow this layout (docs/secrets.md has a sample).
 *
 * The JSON form in sealed-box.ts is the agent protocol's; both are the same primitive.
 */
import nacl from 'tweetnacl'
import { ValidationError } from '../errors.js'

export const SEALED_BLOB_ALGORITHM = 'x25519-xsalsa20-poly1305'
export const X25519_KEY_BYTES = nacl.box.publicKeyLength
export const SEALED_BLOB_NONCE_BYTES = nacl.box.nonceLength
/** Ephemeral public key, nonce and the Poly1305 tag: the smallest blob (empty plaintext). */
export const SEALED_BLOB_OVERHEAD = X25519_KEY_BYTES + SEALED_BLOB_NONCE_BYTES + nacl.box.overheadLength

export function sealBlob(plaintext: Uint8Array, recipientPublicKey: Uint8Array): Uint8Array {
  assertUsableRecipientKey(recipientPublicKey)
  const ephemeral = nacl.box.keyPair()
  const nonce = nacl.randomBytes(SEALED_BLOB_NONCE_BYTES)
  const ciphertext = nacl.box(plaintext, nonce, recipientPublicKey, ephemeral.secretKey)
  ephemeral.secretKey.fill(0)
  const blob = new Uint8Array(X25519_KEY_BYTES + SEALED_BLOB_NONCE_BYTES + ciphertext.length)
  blob.set(ephemeral.publicKey, 0)
  blob.set(nonce, X25519_KEY_BYTES)
  blob.set(ciphertext, X25519_KEY_BYTES + SEALED_BLOB_NONCE_BYTES)
  return blob
}

/** The plaintext; ValidationError when the blob is too short, altered or sealed to another key. */
export function openBlob(blob: Uint8Array, recipientSecretKey: Uint8Array): Uint8Array {
  assertBlobLength(blob)
  const ephemeralPublicKey = blob.subarray(0, X25519_KEY_BYTES)
  const nonce = blob.subarray(X25519_KEY_BYTES, X25519_KEY_BYTES + SEALED_BLOB_NONCE_BYTES)
  const ciphertext = blob.subarray(X25519_KEY_BYTES + SEALED_BLOB_NONCE_BYTES)
  const plaintext = nacl.box.open(ciphertext, nonce, ephemeralPublicKey, recipientSecretKey)
  if (!plaintext) {
    throw new ValidationError(
      'sealed box does not open',
      'it was sealed to another public key, altered, or not laid out as ephemeral public key (32) || nonce (24) || ciphertext',
    )
  }
  return plaintext
}

/** ValidationError when the blob cannot even hold the layout's fixed parts. */
export function assertBlobLength(blob: Uint8Array): void {
  if (blob.length < SEALED_BLOB_OVERHEAD) {
    throw new ValidationError(
      'sealed box too short',
      `a sealed box is at least ${SEALED_BLOB_OVERHEAD} bytes (ephemeral public key 32, nonce 24, ciphertext with its 16-byte tag); got ${blob.length}`,
    )
  }
}

/**
 * Refuses keys that are not 32 bytes and the small-order points of Curve25519 (all-zero and the
 * like): with them the X25519 shared secret is all zeros whatever the ephemeral key, so a box
 * "sealed" to one could be opened by anyone. A clamped scalar is a multiple of the cofactor 8, so
 * multiplying a small-order point by any scalar gives the identity, encoded as 32 zero bytes.
 */
export function assertUsableRecipientKey(publicKey: Uint8Array): void {
  if (publicKey.length !== X25519_KEY_BYTES) {
    throw new ValidationError('invalid recipient public key', `an X25519 public key is ${X25519_KEY_BYTES} bytes; got ${publicKey.length}`)
  }
  const probe = nacl.scalarMult(nacl.randomBytes(nacl.scalarMult.scalarLength), publicKey)
  if (probe.every((b) => b === 0)) {
    throw new ValidationError('invalid recipient public key', 'the key is a small-order point; nothing sealed to it would be secret')
  }
}
