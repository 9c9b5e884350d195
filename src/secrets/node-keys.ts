/**
 * A node's chain keys (`node_keys`), each encrypted under the node's data key with AES-256-GCM.
 * The associated data binds a ciphertext to its node id and key name, so a ciphertext copied to
 * another row (another key, another node) does not decrypt there.
 *
 * Key types: `ed25519` and `secp256k1` are generated here (private key bytes plus the public key,
 * hex); `opaque` is stored as given (user-provided or captured on the node, e.g. a keystore file).
 */
import crypto from 'node:crypto'
// The subpath holding computeAddress: the 'ethers' index loads the whole library (~3x the time).
import { computeAddress } from 'ethers/transaction'
import { toBool, toDate } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import type { DataKey } from './data-keys.js'
import { KeyMaterialError } from './errors.js'
import {
  isKeySource,
  isNodeKeyType,
  KEY_SOURCES,
  MAX_KEY_MATERIAL_BYTES,
  MAX_KEY_NAME_LENGTH,
  NODE_KEY_TYPES,
  type GeneratableKeyType,
  type KeySource,
  type NodeKeyType,
} from './node-key-types.js'

export { isKeySource, isNodeKeyType, KEY_SOURCES, MAX_KEY_MATERIAL_BYTES, MAX_KEY_NAME_LENGTH, NODE_KEY_TYPES, type GeneratableKeyType, type KeySource, type NodeKeyType }

/** Names become file names on the node host (keys/<name>), so they stay path-safe. */
const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/

const IV_BYTES = 12
const TAG_BYTES = 16
const PRIVATE_KEY_BYTES = 32
/** PKCS#8 DER of an Ed25519 private key, up to the 32-byte seed (RFC 8410). */
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex')

export interface GeneratedKey {
  keyType: GeneratableKeyType
  /** ed25519: the 32-byte seed; secp256k1: the 32-byte scalar. */
  privateKey: Buffer
  /** Hex: ed25519 the raw 32-byte key; secp256k1 the 33-byte compressed point. */
  publicKey: string
  /** secp256k1 only: the EIP-55 checksummed Ethereum address. */
  address?: string
}

export function generateKey(keyType: GeneratableKeyType): GeneratedKey {
  const privateKey = crypto.randomBytes(PRIVATE_KEY_BYTES)
  if (keyType === 'secp256k1') {
    // 1 <= d < n fails with probability ~2^-128; a new draw is the textbook answer.
    try {
      return { keyType, privateKey, ...secp256k1Public(privateKey) }
    } catch {
      return generateKey(keyType)
    }
  }
  return { keyType, privateKey, publicKey: derivePublicKey('ed25519', privateKey) }
}

/** The public key (hex, as `GeneratedKey.publicKey`) of a private key of a known type. */
export function derivePublicKey(keyType: GeneratableKeyType, privateKey: Uint8Array): string {
  if (privateKey.length !== PRIVATE_KEY_BYTES) {
    throw new ValidationError('invalid private key', `an ${keyType} private key is ${PRIVATE_KEY_BYTES} bytes; got ${privateKey.length}`)
  }
  if (keyType === 'secp256k1') return secp256k1Public(privateKey).publicKey
  const key = crypto.createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, privateKey]), format: 'der', type: 'pkcs8' })
  const jwk = crypto.createPublicKey(key).export({ format: 'jwk' })
  return Buffer.from(String(jwk.x), 'base64url').toString('hex')
}

function secp256k1Public(privateKey: Uint8Array): { publicKey: string; address: string } {
  const ecdh = crypto.createECDH('secp256k1')
  try {
    ecdh.setPrivateKey(privateKey)
  } catch {
    throw new ValidationError('invalid private key', 'not a valid secp256k1 private key (must be between 1 and the curve order)')
  }
  const compressed = ecdh.getPublicKey('hex', 'compressed')
  return { publicKey: compressed, address: computeAddress(`0x${compressed}`) }
}

/** The Ethereum address of a secp256k1 public key (hex, compressed or uncompressed). */
export function ethereumAddress(publicKeyHex: string): string {
  return computeAddress(publicKeyHex.startsWith('0x') ? publicKeyHex : `0x${publicKeyHex}`)
}

function associatedData(nodeId: string, name: string): Buffer {
  return Buffer.from(`nodeplane node key v1\0${nodeId}\0${name}`, 'utf8')
}

/** base64 of iv (12) || tag (16) || ciphertext, under the node's data key, bound to node and name. */
export function encryptKeyMaterial(dataKey: DataKey, name: string, plaintext: Uint8Array): string {
  const iv = crypto.randomBytes(IV_BYTES)
  const cipher = crypto.createCipheriv('aes-256-gcm', dataKey.bytes, iv)
  cipher.setAAD(associatedData(dataKey.nodeId, name))
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()])
  return Buffer.concat([iv, cipher.getAuthTag(), ciphertext]).toString('base64')
}

/** The plaintext; KeyMaterialError when the ciphertext is not this node's key `name`. */
export function decryptKeyMaterial(dataKey: DataKey, name: string, encoded: string): Buffer {
  const bytes = Buffer.from(encoded, 'base64')
  if (bytes.length < IV_BYTES + TAG_BYTES) throw unreadable(dataKey.nodeId, name, 'the stored ciphertext is truncated')
  try {
    const decipher = crypto.createDecipheriv('aes-256-gcm', dataKey.bytes, bytes.subarray(0, IV_BYTES))
    decipher.setAAD(associatedData(dataKey.nodeId, name))
    decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
    return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()])
  } catch {
    throw unreadable(dataKey.nodeId, name, 'it does not authenticate under the node data key (altered, or moved from another key or node)')
  }
}

function unreadable(nodeId: string, name: string, why: string): KeyMaterialError {
  return new KeyMaterialError(`cannot decrypt key "${name}" of node ${nodeId}`, why)
}

/** A key's metadata: everything but the key material. */
export interface NodeKeyInfo {
  id: string
  node_id: string
  name: string
  key_type: NodeKeyType
  source: KeySource
  public_key: string | null
  /** secp256k1 keys: the Ethereum address of `public_key`. */
  address: string | null
  exportable: boolean
  created_at: Date
}

export interface DecryptedNodeKey extends NodeKeyInfo {
  plaintext: Buffer
}

type NodeKeyRow = Record<'id' | 'node_id' | 'name' | 'key_type' | 'source' | 'public_key' | 'exportable' | 'created_at', unknown>

const INFO_COLUMNS = ['id', 'node_id', 'name', 'key_type', 'source', 'public_key', 'exportable', 'created_at'] as const

function infoFromRow(row: NodeKeyRow): NodeKeyInfo {
  const keyType = String(row.key_type) as NodeKeyType
  const publicKey = (row.public_key as string | null) ?? null
  return {
    id: String(row.id),
    node_id: String(row.node_id),
    name: String(row.name),
    key_type: keyType,
    source: String(row.source) as KeySource,
    public_key: publicKey,
    address: keyType === 'secp256k1' && publicKey ? ethereumAddress(publicKey) : null,
    exportable: toBool(row.exportable),
    created_at: toDate(row.created_at),
  }
}

export interface NewNodeKey {
  nodeId: string
  name: string
  keyType: NodeKeyType
  source: KeySource
  plaintext: Uint8Array
  /** Derived from the private key for ed25519 / secp256k1 when omitted (and checked when given). */
  publicKey?: string | null
  exportable: boolean
}

export function validateKeyName(name: string): void {
  if (name.length === 0 || name.length > MAX_KEY_NAME_LENGTH || !KEY_NAME.test(name)) {
    throw new ValidationError(
      `invalid key name "${name.slice(0, 40)}"`,
      `a key name is 1 to ${MAX_KEY_NAME_LENGTH} letters, digits, ".", "_" or "-", starting with a letter or digit`,
    )
  }
}

/**
 * Encrypts and stores one key of the data key's node. A second key of the same name is a
 * ConflictError (see `generateNodeKey` for the idempotent form).
 */
export async function storeNodeKey(db: Queryable, input: NewNodeKey, dataKey: DataKey, now: Date = new Date()): Promise<NodeKeyInfo> {
  if (dataKey.nodeId !== input.nodeId) throw new Error(`storeNodeKey: data key of node ${dataKey.nodeId} given for node ${input.nodeId}`)
  validateKeyName(input.name)
  if (!isNodeKeyType(input.keyType)) throw new ValidationError(`unknown key type "${String(input.keyType).slice(0, 40)}"`, `key types: ${NODE_KEY_TYPES.join(', ')}`)
  if (!isKeySource(input.source)) throw new ValidationError(`unknown key source "${String(input.source).slice(0, 40)}"`, `sources: ${KEY_SOURCES.join(', ')}`)
  if (input.plaintext.length === 0 || input.plaintext.length > MAX_KEY_MATERIAL_BYTES) {
    throw new ValidationError(`key "${input.name}": key material must be 1 to ${MAX_KEY_MATERIAL_BYTES} bytes`)
  }
  const publicKey = resolvePublicKey(input)
  const row = {
    id: uuidv7(now.getTime()),
    node_id: input.nodeId,
    name: input.name,
    key_type: input.keyType,
    source: input.source,
    public_key: publicKey,
    ciphertext: encryptKeyMaterial(dataKey, input.name, input.plaintext),
    exportable: input.exportable,
    created_at: now,
  }
  try {
    await db('node_keys').insert(row)
  } catch (err) {
    if (isUniqueViolation(err)) throw new ConflictError(`node ${input.nodeId} already has a key "${input.name}"`)
    throw err
  }
  return infoFromRow(row)
}

function resolvePublicKey(input: NewNodeKey): string | null {
  if (input.keyType === 'opaque') return input.publicKey ?? null
  const derived = derivePublicKey(input.keyType, input.plaintext)
  if (input.publicKey != null && input.publicKey.toLowerCase().replace(/^0x/, '') !== derived) {
    throw new ValidationError(`key "${input.name}": the public key does not belong to the private key`)
  }
  return derived
}

/**
 * A `generated` key: created and stored on the first call; later calls (a retried provisioning
 * step) return the stored key's metadata. A stored key of another type is a ConflictError.
 */
export async function generateNodeKey(
  db: Queryable,
  input: { nodeId: string; name: string; keyType: GeneratableKeyType; exportable?: boolean },
  dataKey: DataKey,
  now: Date = new Date(),
): Promise<NodeKeyInfo> {
  const existing = await findNodeKey(db, input.nodeId, input.name)
  if (existing) return sameType(existing, input.keyType)
  const key = generateKey(input.keyType)
  try {
    return await storeNodeKey(
      db,
      { nodeId: input.nodeId, name: input.name, keyType: input.keyType, source: 'generated', plaintext: key.privateKey, publicKey: key.publicKey, exportable: input.exportable ?? true },
      dataKey,
      now,
    )
  } catch (err) {
    const raced = err instanceof ConflictError ? await findNodeKey(db, input.nodeId, input.name) : undefined
    if (raced) return sameType(raced, input.keyType)
    throw err
  } finally {
    key.privateKey.fill(0)
  }
}

function sameType(key: NodeKeyInfo, keyType: NodeKeyType): NodeKeyInfo {
  if (key.key_type !== keyType) throw new ConflictError(`node ${key.node_id} already has a key "${key.name}" of type ${key.key_type}, not ${keyType}`)
  return key
}

export async function findNodeKey(db: Queryable, nodeId: string, name: string): Promise<NodeKeyInfo | undefined> {
  const row = (await db('node_keys').where({ node_id: nodeId, name }).first(...INFO_COLUMNS)) as NodeKeyRow | undefined
  return row ? infoFromRow(row) : undefined
}

/** The node's keys, by name; metadata only. */
export async function listNodeKeys(db: Queryable, nodeId: string): Promise<NodeKeyInfo[]> {
  const rows = (await db('node_keys').where({ node_id: nodeId }).orderBy('name').select(...INFO_COLUMNS)) as NodeKeyRow[]
  return rows.map(infoFromRow)
}

/** One key's material. NotFoundError when the node has no key of that name. */
export async function decryptNodeKey(db: Queryable, dataKey: DataKey, name: string): Promise<Buffer> {
  const row = (await db('node_keys').where({ node_id: dataKey.nodeId, name }).first('ciphertext')) as { ciphertext: string } | undefined
  if (!row) throw new NotFoundError(`node ${dataKey.nodeId} has no key "${name.slice(0, MAX_KEY_NAME_LENGTH)}"`)
  return decryptKeyMaterial(dataKey, name, row.ciphertext)
}

/**
 * The data key's node's keys with their material, by name (one query): for injection into the
 * node and for export. The caller overwrites each `plaintext` once done with it.
 */
export async function decryptNodeKeys(db: Queryable, dataKey: DataKey, options: { exportableOnly?: boolean } = {}): Promise<DecryptedNodeKey[]> {
  const query = db('node_keys').where({ node_id: dataKey.nodeId })
  if (options.exportableOnly) query.andWhere({ exportable: true })
  const rows = (await query.orderBy('name').select(...INFO_COLUMNS, 'ciphertext')) as (NodeKeyRow & { ciphertext: string })[]
  const keys: DecryptedNodeKey[] = []
  try {
    for (const row of rows) {
      const info = infoFromRow(row)
      keys.push({ ...info, plaintext: decryptKeyMaterial(dataKey, info.name, row.ciphertext) })
    }
  } catch (err) {
    for (const key of keys) key.plaintext.fill(0)
    throw err
  }
  return keys
}
