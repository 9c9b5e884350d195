/**
 * Release public keys as the control plane and agents are configured with them (docs/artifacts.md,
 * "Release keys"). Kept apart from signing.ts so that reading the configuration does not load
 * tweetnacl in every process.
 */
import crypto from 'node:crypto'
import { z } from 'zod'

/** Ed25519 public keys are 32 bytes. */
const PUBLIC_KEY_BYTES = 32

/** First 16 hex digits of SHA-256 of the public key (as the server keys' ids). */
export function releaseKeyId(publicKey: Uint8Array): string {
  return crypto.createHash('sha256').update(publicKey).digest('hex').slice(0, 16)
}

export interface ReleasePublicKey {
  key_id: string
  key: Uint8Array
}

/** A public key given as base64 (a line of a `.pub` file, an entry of ARTIFACT_RELEASE_PUBLIC_KEYS). */
export function parsePublicKey(text: string): ReleasePublicKey | undefined {
  const trimmed = text.trim()
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(trimmed)) return undefined
  const key = new Uint8Array(Buffer.from(trimmed, 'base64'))
  return key.length === PUBLIC_KEY_BYTES ? { key_id: releaseKeyId(key), key } : undefined
}

/**
 * AGENT_REQUIRE_SIGNED_ARTIFACTS: whether agents refuse an artifact without a release signature.
 * Unset stays undefined: each reader applies its own default (docs/artifacts.md, "Agents").
 */
export const requireSignedArtifactsSetting = z
  .enum(['true', 'false', '1', '0'], { message: 'must be true or false' })
  .optional()
  .transform((v) => (v === undefined ? undefined : v === 'true' || v === '1'))

/**
 * ARTIFACT_RELEASE_PUBLIC_KEYS: comma-separated base64 Ed25519 public keys (the `.pub` files'
 * lines). Only these verify a release signature.
 */
export const releasePublicKeysSetting = z
  .string()
  .optional()
  .transform((text, ctx) => {
    const keys: ReleasePublicKey[] = []
    for (const raw of (text ?? '').split(',').map((s) => s.trim()).filter((s) => s.length > 0)) {
      const key = parsePublicKey(raw)
      if (key) keys.push(key)
      else ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${raw.slice(0, 60)}" is not a base64 Ed25519 public key (32 bytes; the line of a .pub file from \`nodeplane artifact keygen\`)` })
    }
    return keys
  })

