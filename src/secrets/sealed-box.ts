import nacl from 'tweetnacl'

/**
 * An X25519 + XSalsa20-Poly1305 box from a fresh ephemeral key pair: only the holder of the
 * recipient's secret key can open it. Key material travels to and from node agents this way, so
 * the control-plane database and the gateway only ever hold ciphertext.
 */
export interface SealedBox {
  ephemeral_public_key: string
  nonce: string
  ciphertext: string
}

export interface BoxKeyPair {
  publicKey: Uint8Array
  secretKey: Uint8Array
}

export function generateBoxKeyPair(): BoxKeyPair {
  return nacl.box.keyPair()
}

export function boxKeyPairFromSecret(secretKey: Uint8Array): BoxKeyPair {
  return nacl.box.keyPair.fromSecretKey(secretKey)
}

export function seal(plaintext: Uint8Array, recipientPublicKey: Uint8Array): SealedBox {
  if (recipientPublicKey.length !== nacl.box.publicKeyLength) {
    throw new Error(`recipient public key must be ${nacl.box.publicKeyLength} bytes`)
  }
  const ephemeral = nacl.box.keyPair()
  const nonce = nacl.randomBytes(nacl.box.nonceLength)
  const ciphertext = nacl.box(plaintext, nonce, recipientPublicKey, ephemeral.secretKey)
  return {
    ephemeral_public_key: Buffer.from(ephemeral.publicKey).toString('base64'),
    nonce: Buffer.from(nonce).toString('base64'),
    ciphertext: Buffer.from(ciphertext).toString('base64'),
  }
}

/** Returns the plaintext, or throws when the box was not sealed to this key or was altered. */
export function open(box: SealedBox, recipientSecretKey: Uint8Array): Uint8Array {
  const plaintext = nacl.box.open(
    Buffer.from(box.ciphertext, 'base64'),
    Buffer.from(box.nonce, 'base64'),
    Buffer.from(box.ephemeral_public_key, 'base64'),
    recipientSecretKey,
  )
  if (!plaintext) throw new Error('sealed box cannot be opened with this key (wrong recipient or altered)')
  return plaintext
}
