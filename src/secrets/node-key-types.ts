/**
 * Names and limits of node keys. Apart from node-keys.ts (which re-exports them) so that modules
 * needing only these, such as input specs, the chain catalogue and CLI commands, do not load the
 * key store and its crypto dependencies.
 */

export const NODE_KEY_TYPES = ['ed25519', 'secp256k1', 'opaque'] as const
export type NodeKeyType = (typeof NODE_KEY_TYPES)[number]
/** Types the service can create itself (source `generated`). */
export type GeneratableKeyType = Exclude<NodeKeyType, 'opaque'>

/** Spec, Provisioning input spec: where a secret comes from. */
export const KEY_SOURCES = ['generated', 'chain_generated', 'user_provided'] as const
export type KeySource = (typeof KEY_SOURCES)[number]

export const MAX_KEY_NAME_LENGTH = 100
/** A chain key, a keystore, a certificate: well under this; larger is a mistake, not a key. */
export const MAX_KEY_MATERIAL_BYTES = 64 * 1024

export function isNodeKeyType(value: string): value is NodeKeyType {
  return (NODE_KEY_TYPES as readonly string[]).includes(value)
}

export function isKeySource(value: string): value is KeySource {
  return (KEY_SOURCES as readonly string[]).includes(value)
}
