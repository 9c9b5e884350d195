/**
 * The server's X25519 key pairs (`server_key_pairs`): clients seal secret inputs to the active
 * public key (`GET /api/v1/crypto/public-key`); the secret half is stored wrapped by the master
 * key. Rotation makes a new pair active and keeps the old ones (with `retired_at`), so inputs
 * sealed to a key a client fetched before the rotation still open.
 *
 * Exactly one pair is active in the steady state. Should two servers create or rotate at the same
 * moment, the newest active pair wins and each of them retires the others, so every reader agrees.
 */
import crypto from 'node:crypto'
import nacl from 'tweetnacl'
import { isPostgres, toDate, toDateOrNull } from '../db/dialect.js'
import type { Db, Queryable } from '../db/knex.js'
import { UnavailableError, ValidationError } from '../errors.js'
import { KeyMaterialError } from './errors.js'
import type { MasterKey } from './master-key.js'
import { assertBlobLength, openBlob, SEALED_BLOB_ALGORITHM } from './sealed-blob.js'

export const SERVER_KEY_ALGORITHM = SEALED_BLOB_ALGORITHM

/** What clients are given: the public half, with the id that tells rotated keys apart. */
export interface ServerPublicKey {
  key_id: string
  /** base64 of the 32-byte X25519 public key. */
  public_key: string
  algorithm: typeof SERVER_KEY_ALGORITHM
}

export interface ServerKeyInfo extends ServerPublicKey {
  master_key_id: string
  created_at: Date
  retired_at: Date | null
}

type ServerKeyRow = Record<'id' | 'public_key' | 'master_key_id' | 'created_at' | 'retired_at', unknown>

const INFO_COLUMNS = ['id', 'public_key', 'master_key_id', 'created_at', 'retired_at'] as const

/** First 16 hex digits of SHA-256 of the public key: a client can check the id against the key. */
export function serverKeyId(publicKey: Uint8Array): string {
  return crypto.createHash('sha256').update(publicKey).digest('hex').slice(0, 16)
}

function infoFromRow(row: ServerKeyRow): ServerKeyInfo {
  return {
    key_id: String(row.id),
    public_key: String(row.public_key),
    algorithm: SERVER_KEY_ALGORITHM,
    master_key_id: String(row.master_key_id),
    created_at: toDate(row.created_at),
    retired_at: toDateOrNull(row.retired_at),
  }
}

function publicView(info: ServerKeyInfo): ServerPublicKey {
  return { key_id: info.key_id, public_key: info.public_key, algorithm: info.algorithm }
}

/** Active first (newest first), then retired ones, most recently retired first. */
export async function listServerKeys(db: Queryable): Promise<ServerKeyInfo[]> {
  const rows = (await db('server_key_pairs').select(...INFO_COLUMNS)) as ServerKeyRow[]
  return rows.map(infoFromRow).sort(byPreference)
}

function byPreference(a: ServerKeyInfo, b: ServerKeyInfo): number {
  if ((a.retired_at === null) !== (b.retired_at === null)) return a.retired_at === null ? -1 : 1
  const at = (k: ServerKeyInfo) => (k.retired_at ?? k.created_at).getTime()
  const byTime = at(b) - at(a) || b.created_at.getTime() - a.created_at.getTime()
  return byTime !== 0 ? byTime : b.key_id.localeCompare(a.key_id)
}

/** The key clients should seal to; undefined before `nodeplane secrets init`. */
export async function activeServerPublicKey(db: Queryable): Promise<ServerPublicKey | undefined> {
  const active = await activeServerKeys(db)
  return active[0] ? publicView(active[0]) : undefined
}

async function activeServerKeys(db: Queryable): Promise<ServerKeyInfo[]> {
  const rows = (await db('server_key_pairs').whereNull('retired_at').select(...INFO_COLUMNS)) as ServerKeyRow[]
  return rows.map(infoFromRow).sort(byPreference)
}

async function insertServerKeyPair(db: Queryable, masterKey: MasterKey, now: Date): Promise<ServerKeyInfo> {
  const pair = nacl.box.keyPair()
  try {
    const row = {
      id: serverKeyId(pair.publicKey),
      public_key: Buffer.from(pair.publicKey).toString('base64'),
      master_key_id: masterKey.id,
      wrapped_secret_key: await masterKey.wrap(pair.secretKey),
      created_at: now,
      retired_at: null,
    }
    await db('server_key_pairs').insert(row)
    return infoFromRow(row)
  } finally {
    pair.secretKey.fill(0)
  }
}

/** Retires every active pair but the preferred one; returns the one left active. */
async function settleActive(db: Queryable, now: Date): Promise<ServerKeyInfo> {
  const [keep, ...others] = await activeServerKeys(db)
  if (!keep) throw new Error('no active server key pair after creating one')
  if (others.length > 0) {
    await db('server_key_pairs')
      .whereIn(
        'id',
        others.map((k) => k.key_id),
      )
      .whereNull('retired_at')
      .update({ retired_at: now })
  }
  return keep
}

/**
 * Serialises the check-then-create of ensure and rotate: several processes starting at once
 * (orchestrators, `up`) must agree on one active pair. Postgres: a transaction-scoped advisory
 * lock; SQLite has one writer, and its pool one connection.
 */
async function withServerKeyLock<T>(db: Queryable, work: (trx: Queryable) => Promise<T>): Promise<T> {
  const run = async (trx: Queryable) => {
    if (isPostgres(trx)) await trx.raw("SELECT pg_advisory_xact_lock(hashtext('nodeplane.server_key_pairs'))")
    return work(trx)
  }
  return 'isTransaction' in db && db.isTransaction ? run(db) : (db as Db).transaction(run)
}

/** The active pair, created first when there is none (`secrets init`, `up`). Idempotent. */
export async function ensureServerKeyPair(db: Queryable, masterKey: MasterKey, now: Date = new Date()): Promise<{ publicKey: ServerPublicKey; created: boolean }> {
  return withServerKeyLock(db, async (trx) => {
    const active = await activeServerPublicKey(trx)
    if (active) return { publicKey: active, created: false }
    const created = await insertServerKeyPair(trx, masterKey, now)
    const kept = await settleActive(trx, now)
    return { publicKey: publicView(kept), created: kept.key_id === created.key_id }
  })
}

/**
 * A new active pair; the previous ones stay (retired) so boxes sealed to them still open.
 * The new pair is inserted before the old ones are retired, so there is never a moment without
 * an active key.
 */
export async function rotateServerKeyPair(db: Queryable, masterKey: MasterKey, now: Date = new Date()): Promise<{ publicKey: ServerPublicKey; retired: string[] }> {
  return withServerKeyLock(db, async (trx) => {
    const before = await activeServerKeys(trx)
    const created = await insertServerKeyPair(trx, masterKey, now)
    await trx('server_key_pairs').whereNot({ id: created.key_id }).whereNull('retired_at').update({ retired_at: now })
    return { publicKey: publicView(created), retired: before.map((k) => k.key_id) }
  })
}

/**
 * Opens a blob in the spec's layout with the active key, else with the retired ones (newest
 * first): the layout carries no key id, so each is tried. ValidationError when none opens it;
 * UnavailableError when the server has no key pair at all.
 */
export async function openWithServerKey(db: Queryable, masterKey: MasterKey, blob: Uint8Array): Promise<{ plaintext: Uint8Array; keyId: string }> {
  assertBlobLength(blob)
  const rows = (await db('server_key_pairs').select(...INFO_COLUMNS, 'wrapped_secret_key')) as (ServerKeyRow & { wrapped_secret_key: string })[]
  if (rows.length === 0) throw new UnavailableError('secrets are not initialised', 'the server has no X25519 key pair yet; an operator runs `nodeplane secrets init`')
  const wrapped = new Map(rows.map((r) => [String(r.id), r.wrapped_secret_key]))
  const candidates = rows.map(infoFromRow).sort(byPreference)
  let unusable = 0
  for (const candidate of candidates) {
    let secretKey: Uint8Array
    try {
      secretKey = await masterKey.unwrap(wrapped.get(candidate.key_id) as string)
    } catch (err) {
      // A key wrapped by another master key cannot have been what the client used here.
      if (!(err instanceof KeyMaterialError)) throw err
      unusable++
      continue
    }
    try {
      return { plaintext: openBlob(blob, secretKey), keyId: candidate.key_id }
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err
    } finally {
      secretKey.fill(0)
    }
  }
  if (unusable === candidates.length) {
    throw new KeyMaterialError('no server key pair can be unwrapped', `all ${unusable} were wrapped by a master key other than ${masterKey.id}`)
  }
  throw new ValidationError(
    'sealed box does not open',
    'it was not sealed to a public key of this server, was altered, or is not laid out as ephemeral public key (32) || nonce (24) || ciphertext; fetch GET /api/v1/crypto/public-key and seal again',
  )
}
