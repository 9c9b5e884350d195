/**
 * Release signatures (docs/artifacts.md, "Release keys"): Ed25519 (tweetnacl) over a statement
 * that binds the bytes' digest and size to the binary and version they are released as, so a
 * signed 1.5.1 cannot be relabelled 1.7.1. The private key lives offline with whoever releases
 * (a file made by `nodeplane artifact keygen`); the control plane and the agents only ever hold
 * public keys.
 */
import fs from 'node:fs'
import nacl from 'tweetnacl'
import { z } from 'zod'
import { ValidationError } from '../errors.js'
import { releaseKeyId, type ReleasePublicKey } from './release-keys.js'

export { parsePublicKey, releaseKeyId, releasePublicKeysSetting, type ReleasePublicKey } from './release-keys.js'

export const SIGNATURE_ALGORITHM = 'ed25519'
const PRIVATE_KEY_KIND = 'nodeplane-release-key'

export interface ArtifactIdentity {
  binary_name: string
  version: string
  /** Lowercase hex. */
  sha256: string
  size_bytes: number
}

/** What is signed: one line per field, so no field can bleed into another. */
export function signedStatement(artifact: ArtifactIdentity): Uint8Array {
  return new TextEncoder().encode(`nodeplane-artifact-v1\nbinary=${artifact.binary_name}\nversion=${artifact.version}\nsha256=${artifact.sha256}\nsize=${artifact.size_bytes}\n`)
}

export interface ReleaseKeyPair {
  key_id: string
  /** base64 of the 32-byte public key. */
  public_key: string
  secretKey: Uint8Array
}

export function generateReleaseKey(): ReleaseKeyPair {
  const pair = nacl.sign.keyPair()
  return { key_id: releaseKeyId(pair.publicKey), public_key: Buffer.from(pair.publicKey).toString('base64'), secretKey: pair.secretKey }
}

/** The private key file's text (JSON); written with mode 0600 by keygen. */
export function privateKeyFileText(pair: ReleaseKeyPair): string {
  return `${JSON.stringify({ kind: PRIVATE_KEY_KIND, algorithm: SIGNATURE_ALGORITHM, key_id: pair.key_id, public_key: pair.public_key, secret_key: Buffer.from(pair.secretKey).toString('base64') }, null, 2)}\n`
}

const privateKeyFile = z.object({ kind: z.literal(PRIVATE_KEY_KIND), algorithm: z.literal(SIGNATURE_ALGORITHM), secret_key: z.string() })

/** Reads a private key file; a ValidationError that names the file (never its content) otherwise. */
export function readPrivateKeyFile(file: string): ReleaseKeyPair {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    throw new ValidationError(`cannot read the release key ${file}`, `${(err as NodeJS.ErrnoException).code ?? (err as Error).message}; make one with \`nodeplane artifact keygen\``)
  }
  let parsed: z.infer<typeof privateKeyFile> | undefined
  try {
    const result = privateKeyFile.safeParse(JSON.parse(text))
    if (result.success) parsed = result.data
  } catch {
    parsed = undefined
  }
  const secretKey = parsed ? Buffer.from(parsed.secret_key, 'base64') : undefined
  if (!secretKey || secretKey.length !== nacl.sign.secretKeyLength) {
    throw new ValidationError(`${file} is not a nodeplane release key`, 'expected the private key file written by `nodeplane artifact keygen`')
  }
  const publicKey = nacl.sign.keyPair.fromSecretKey(new Uint8Array(secretKey)).publicKey
  return { key_id: releaseKeyId(publicKey), public_key: Buffer.from(publicKey).toString('base64'), secretKey: new Uint8Array(secretKey) }
}

/** base64 of the detached signature over the artifact's statement. */
export function signArtifact(artifact: ArtifactIdentity, secretKey: Uint8Array): string {
  return Buffer.from(nacl.sign.detached(signedStatement(artifact), secretKey)).toString('base64')
}

/** The key that made `signature` over the artifact, among `keys`; undefined when none did (or it is malformed). */
export function verifyingKey(artifact: ArtifactIdentity, signature: string, keys: readonly ReleasePublicKey[]): ReleasePublicKey | undefined {
  const bytes = /^[A-Za-z0-9+/]+={0,2}$/.test(signature) ? new Uint8Array(Buffer.from(signature, 'base64')) : new Uint8Array()
  if (bytes.length !== nacl.sign.signatureLength) return undefined
  const statement = signedStatement(artifact)
  return keys.find((k) => nacl.sign.detached.verify(statement, bytes, k.key))
}
