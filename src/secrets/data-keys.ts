/**
 * One 32-byte data key per node (spec: Key hierarchy), stored only wrapped by the master key
 * (`node_data_keys`). It encrypts that node's chain keys (node-keys.ts). Deleting it, with the
 * node's keys, is what makes them unrecoverable: the database then holds nothing that decrypts
 * them, and the master key never encrypted them directly.
 */
import crypto from 'node:crypto'
import { inspect } from 'node:util'
import type { Queryable } from '../db/knex.js'
import { isUniqueViolation } from '../db/errors.js'
import { NotFoundError } from '../errors.js'
import { KeyMaterialError } from './errors.js'
import type { MasterKey } from './master-key.js'

export const DATA_KEY_BYTES = 32

/**
 * A node's plaintext data key, bound to its node. It prints as `[data key <node id>]` (logs,
 * JSON, util.inspect), so a stray log call cannot leak it. Call `destroy()` when done.
 */
export class DataKey {
  readonly #bytes: Buffer

  constructor(
    readonly nodeId: string,
    bytes: Uint8Array,
  ) {
    if (bytes.length !== DATA_KEY_BYTES) throw new KeyMaterialError('invalid data key', `node ${nodeId}: a data key is ${DATA_KEY_BYTES} bytes, not ${bytes.length}`)
    this.#bytes = Buffer.from(bytes)
  }

  /** The key bytes, for the AEAD only; never store or log them. */
  get bytes(): Buffer {
    return this.#bytes
  }

  /** Overwrites the bytes in memory; the key is unusable afterwards. */
  destroy(): void {
    this.#bytes.fill(0)
  }

  toJSON(): string {
    return this.toString()
  }

  toString(): string {
    return `[data key ${this.nodeId}]`
  }

  [inspect.custom](): string {
    return this.toString()
  }
}

/**
 * The node's data key, created when it has none. Idempotent: a second call (a retried
 * provisioning step, a concurrent one) returns the key already stored.
 */
export async function createDataKey(db: Queryable, masterKey: MasterKey, nodeId: string, now: Date = new Date()): Promise<DataKey> {
  const existing = await db('node_data_keys').where({ node_id: nodeId }).first('node_id')
  if (existing) return loadDataKey(db, masterKey, nodeId)
  const bytes = crypto.randomBytes(DATA_KEY_BYTES)
  try {
    const wrapped = await masterKey.wrap(bytes)
    await db('node_data_keys').insert({ node_id: nodeId, master_key_id: masterKey.id, wrapped_key: wrapped, created_at: now })
    return new DataKey(nodeId, bytes)
  } catch (err) {
    // Another caller stored one first: theirs is the node's key.
    if (isUniqueViolation(err)) return loadDataKey(db, masterKey, nodeId)
    throw err
  } finally {
    bytes.fill(0)
  }
}

/** The node's data key, unwrapped. NotFoundError when it has none (never created, or deleted). */
export async function loadDataKey(db: Queryable, masterKey: MasterKey, nodeId: string): Promise<DataKey> {
  const row = (await db('node_data_keys').where({ node_id: nodeId }).first('wrapped_key', 'master_key_id')) as { wrapped_key: string; master_key_id: string } | undefined
  if (!row) throw new NotFoundError(`node ${nodeId} has no data key`, 'its keys were never created or have been deleted (a terminated node); they cannot be recovered')
  let bytes: Uint8Array
  try {
    bytes = await masterKey.unwrap(row.wrapped_key)
  } catch (err) {
    if (err instanceof KeyMaterialError) throw new KeyMaterialError(`cannot unwrap the data key of node ${nodeId}`, err.details)
    throw err
  }
  try {
    return new DataKey(nodeId, bytes)
  } finally {
    bytes.fill(0)
  }
}

export async function hasDataKey(db: Queryable, nodeId: string): Promise<boolean> {
  return (await db('node_data_keys').where({ node_id: nodeId }).first('node_id')) !== undefined
}

/**
 * Deletes the node's chain keys and its data key (spec: "Keys are deleted when the subscription
 * terminates; recovery without a backup is impossible"). Idempotent. Call it in the transaction
 * that records the termination; the counts are for the caller's log line.
 */
export async function deleteNodeKeys(db: Queryable, nodeId: string): Promise<{ keys: number; dataKeys: number }> {
  const keys = await db('node_keys').where({ node_id: nodeId }).delete()
  const dataKeys = await db('node_data_keys').where({ node_id: nodeId }).delete()
  return { keys: Number(keys), dataKeys: Number(dataKeys) }
}
