/**
 * API keys (spec: API key resource). The plaintext is `np_` + 43 base64url characters: the
 * fixed prefix tells keys from JWTs and lets secret scanners find leaked ones. Only its SHA-256
 * is stored; the plaintext is returned once, on creation or rotation.
 */
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import { fromJson, isPostgres, lockRow, toDate, toDateOrNull, toJson } from '../db/dialect.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import { TurnBatches, type Waiter } from '../db/turn-batches.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { ADMIN_SCOPE, isApiKeyScope, type Scope } from './scopes.js'
import { userFromRow, type User } from './users.js'

export const API_KEY_PREFIX = 'np_'
export const MAX_ACTIVE_KEYS_PER_USER = 50
export const MAX_KEY_NAME_LENGTH = 100
export const MIN_KEY_LIFETIME_MS = 3_600_000
/** `last_used_at` is written at most this often per key, not on every request. */
export const LAST_USED_RESOLUTION_MS = 60_000

const KEY_SHAPE = /^np_[A-Za-z0-9_-]{43}$/

export interface ApiKey {
  id: string
  user_id: string
  name: string
  key_prefix: string
  scopes: Scope[]
  expires_at: Date | null
  revoked_at: Date | null
  last_used_at: Date | null
  deleted_at: Date | null
  rotated_from_id: string | null
  created_at: Date
}

export type ApiKeyRow = Record<keyof ApiKey | 'key_hash' | 'updated_at', unknown>

export function apiKeyFromRow(row: ApiKeyRow): ApiKey {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    name: String(row.name),
    key_prefix: String(row.key_prefix),
    scopes: fromJson<Scope[]>(row.scopes),
    expires_at: toDateOrNull(row.expires_at),
    revoked_at: toDateOrNull(row.revoked_at),
    last_used_at: toDateOrNull(row.last_used_at),
    deleted_at: toDateOrNull(row.deleted_at),
    rotated_from_id: (row.rotated_from_id as string | null) ?? null,
    created_at: toDate(row.created_at),
  }
}

export function looksLikeApiKey(token: string): boolean {
  return token.startsWith(API_KEY_PREFIX)
}

export function hashApiKey(plaintext: string): string {
  return crypto.createHash('sha256').update(plaintext, 'utf8').digest('hex')
}

function generatePlaintext(): string {
  return `${API_KEY_PREFIX}${crypto.randomBytes(32).toString('base64url')}`
}

export function isActive(key: ApiKey, now: Date): boolean {
  return key.revoked_at === null && key.deleted_at === null && (key.expires_at === null || key.expires_at > now)
}

export type ApiKeyStatus = 'active' | 'revoked' | 'expired' | 'deleted'

/** Revocation (and deletion, which revokes too) wins over expiry: it was a deliberate act. */
export function apiKeyStatus(key: ApiKey, now: Date): ApiKeyStatus {
  if (key.deleted_at !== null) return 'deleted'
  if (key.revoked_at !== null) return 'revoked'
  if (key.expires_at !== null && key.expires_at <= now) return 'expired'
  return 'active'
}

export interface NewApiKey {
  userId: string
  name: string
  scopes: readonly string[]
  expiresAt?: Date | null
  /** Only the backend (operator commands) may grant `admin`; never the HTTP API. */
  allowAdmin?: boolean
}

export interface IssuedApiKey {
  apiKey: ApiKey
  /** The plaintext, shown this once. */
  key: string
}

function validate(input: NewApiKey, now: Date, rotation: boolean): { name: string; scopes: Scope[]; expiresAt: Date | null } {
  const name = input.name.trim()
  if (name.length === 0) throw new ValidationError('name: must not be empty')
  if (name.length > MAX_KEY_NAME_LENGTH) throw new ValidationError(`name: at most ${MAX_KEY_NAME_LENGTH} characters`)
  if (input.scopes.length === 0) throw new ValidationError('scopes: at least one scope is required')
  const scopes: Scope[] = []
  for (const scope of input.scopes) {
    if (scope === ADMIN_SCOPE && !input.allowAdmin) {
      throw new ValidationError('scopes: admin cannot be given to an API key through the API', 'an operator issues admin keys with `nodeplane api-key issue --admin`')
    }
    if (scope !== ADMIN_SCOPE && !isApiKeyScope(scope)) throw new ValidationError(`scopes: unknown scope "${scope.slice(0, 40)}"`)
    if (!scopes.includes(scope as Scope)) scopes.push(scope as Scope)
  }
  const expiresAt = input.expiresAt ?? null
  // A rotated key keeps its predecessor's expiry, however near: rotation never extends a key.
  if (expiresAt && !rotation && expiresAt.getTime() - now.getTime() < MIN_KEY_LIFETIME_MS) {
    throw new ValidationError('expires_at: must be at least 1 hour in the future')
  }
  return { name, scopes, expiresAt }
}

/**
 * Creates a key; at most 50 active keys per user. The user's row is locked while counting so
 * concurrent creations cannot pass the limit together. Call inside a transaction.
 */
export async function createApiKey(trx: Queryable, input: NewApiKey, now: Date = new Date(), rotatedFromId: string | null = null): Promise<IssuedApiKey> {
  const { name, scopes, expiresAt } = validate(input, now, rotatedFromId !== null)
  const user = await lockRow(trx, trx('users').where({ id: input.userId }).first('id'))
  if (!user) throw new NotFoundError(`no user ${input.userId}`)
  const active = (await trx('api_keys')
    .where({ user_id: input.userId })
    .whereNull('revoked_at')
    .whereNull('deleted_at')
    .andWhere((q) => q.whereNull('expires_at').orWhere('expires_at', '>', now))
    .count({ n: '*' })
    .first()) as { n: number | string }
  if (Number(active.n) >= MAX_ACTIVE_KEYS_PER_USER) {
    throw new ConflictError(`at most ${MAX_ACTIVE_KEYS_PER_USER} active API keys per user`, 'revoke or delete a key you no longer use')
  }
  const key = generatePlaintext()
  const row = {
    id: uuidv7(now.getTime()),
    user_id: input.userId,
    name,
    key_hash: hashApiKey(key),
    key_prefix: key.slice(0, 10),
    scopes: toJson(scopes),
    rotated_from_id: rotatedFromId,
    expires_at: expiresAt,
    created_at: now,
    updated_at: now,
  }
  await trx('api_keys').insert(row)
  return { key, apiKey: apiKeyFromRow({ ...row, revoked_at: null, last_used_at: null, deleted_at: null }) }
}

/** Keys of one user, newest first, never with the hash; deleted keys are left out. */
export async function listApiKeys(db: Queryable, userId: string): Promise<ApiKey[]> {
  const rows = await db('api_keys').where({ user_id: userId }).whereNull('deleted_at').orderBy('created_at', 'desc').orderBy('id', 'desc')
  return rows.map((r) => apiKeyFromRow(r as ApiKeyRow))
}

/** One key of its owner; another user's key is "not found", never a hint that it exists. */
export async function getApiKey(db: Queryable, userId: string, id: string): Promise<ApiKey> {
  const row = isUuid(id) ? await db('api_keys').where({ id, user_id: userId }).whereNull('deleted_at').first() : undefined
  if (!row) throw new NotFoundError(`no API key ${id.slice(0, 40)}`)
  return apiKeyFromRow(row as ApiKeyRow)
}

/** New key with the same name, scopes and expiry; the old one revoked in the same transaction. */
export async function rotateApiKey(trx: Queryable, userId: string, id: string, now: Date = new Date()): Promise<IssuedApiKey> {
  const old = await getApiKey(trx, userId, id)
  if (!isActive(old, now)) throw new ConflictError(`API key ${id} is ${old.revoked_at ? 'revoked' : 'expired'}`, 'only an active key can be rotated; create a new one')
  const revoked = await trx('api_keys').where({ id }).whereNull('revoked_at').update({ revoked_at: now, updated_at: now })
  if (revoked !== 1) throw new ConflictError(`API key ${id} was revoked concurrently`)
  return createApiKey(
    trx,
    { userId, name: old.name, scopes: old.scopes, expiresAt: old.expires_at, allowAdmin: old.scopes.includes(ADMIN_SCOPE) },
    now,
    old.id,
  )
}

export async function revokeApiKey(db: Queryable, userId: string, id: string, now: Date = new Date()): Promise<ApiKey> {
  const key = await getApiKey(db, userId, id)
  if (key.revoked_at) return key
  await db('api_keys').where({ id }).update({ revoked_at: now, updated_at: now })
  return { ...key, revoked_at: now }
}

/**
 * An operator revokes any user's key (admin route): the key and its owner's id. Unknown id:
 * NotFoundError. Revoking again is harmless.
 */
export async function revokeAnyApiKey(db: Queryable, id: string, now: Date): Promise<ApiKey> {
  const row = isUuid(id) ? ((await db('api_keys').where({ id }).whereNull('deleted_at').first()) as ApiKeyRow | undefined) : undefined
  if (!row) throw new NotFoundError('not found', `no API key ${id}`)
  const key = apiKeyFromRow(row)
  if (key.revoked_at) return key
  await db('api_keys').where({ id }).update({ revoked_at: now, updated_at: now })
  return { ...key, revoked_at: now }
}

/** Soft delete: the row stays for audit, the key stops working and leaves the listings. */
export async function deleteApiKey(db: Queryable, userId: string, id: string, now: Date = new Date()): Promise<void> {
  await getApiKey(db, userId, id)
  await db('api_keys').where({ id }).update({ deleted_at: now, revoked_at: db.raw('coalesce(revoked_at, ?)', [now]), updated_at: now })
}

/** Why a presented key was refused; all answer 401, the reason only sharpens `details`. */
export type ApiKeyRejection = 'malformed' | 'unknown' | 'revoked' | 'expired' | 'deleted' | 'user_disabled'

export type ApiKeyCheck = { ok: true; apiKey: ApiKey; owner: User } | { ok: false; reason: ApiKeyRejection }

type KeyAndOwnerRow = ApiKeyRow & Record<`owner_${string}`, unknown>

interface KeyWaiter extends Waiter<ApiKeyCheck> {
  hash: string
  now: Date
}

const MAX_HASHES_PER_QUERY = 500

const OWNER_COLUMNS = [
  'u.email as owner_email',
  'u.wallet_address as owner_wallet_address',
  'u.wallet_type as owner_wallet_type',
  'u.external_auth_id as owner_external_auth_id',
  'u.is_admin as owner_is_admin',
  'u.disabled_at as owner_disabled_at',
  'u.created_at as owner_created_at',
  'u.updated_at as owner_updated_at',
]

// The lookup's SQL per dialect and number of hashes, built by knex once: building and compiling
// it on every request was a tenth of an authenticated request's CPU.
const lookupSql = new Map<string, string>()

function keysAndOwners(db: Queryable, hashes: string[]): Promise<KeyAndOwnerRow[]> {
  const postgres = isPostgres(db)
  const memo = `${postgres ? 'pg' : 'sqlite'}:${hashes.length}`
  let sql = lookupSql.get(memo)
  if (sql === undefined) {
    sql = db('api_keys as k').join('users as u', 'u.id', 'k.user_id').whereIn('k.key_hash', hashes).select('k.*', ...OWNER_COLUMNS).toSQL().sql
    lookupSql.set(memo, sql)
  }
  return db.raw(sql, hashes).then((result: unknown) => (postgres ? (result as { rows: KeyAndOwnerRow[] }).rows : (result as KeyAndOwnerRow[])))
}

async function answerBatch(db: Queryable, batch: KeyWaiter[]): Promise<void> {
  const hashes = [...new Set(batch.map((w) => w.hash))]
  const rows = new Map<string, KeyAndOwnerRow>()
  for (let i = 0; i < hashes.length; i += MAX_HASHES_PER_QUERY) {
    for (const row of await keysAndOwners(db, hashes.slice(i, i + MAX_HASHES_PER_QUERY))) rows.set(String(row.key_hash), row)
  }
  const answers: Array<[KeyWaiter, ApiKeyCheck]> = []
  // Keys whose `last_used_at` is older than LAST_USED_RESOLUTION_MS, written in one statement below.
  const stale = new Set<string>()
  let latest = 0
  for (const waiter of batch) {
    const row = rows.get(waiter.hash)
    if (!row || !crypto.timingSafeEqual(Buffer.from(String(row.key_hash), 'hex'), Buffer.from(waiter.hash, 'hex'))) {
      answers.push([waiter, { ok: false, reason: 'unknown' }])
      continue
    }
    const key = apiKeyFromRow(row)
    const status = apiKeyStatus(key, waiter.now)
    if (status !== 'active') {
      answers.push([waiter, { ok: false, reason: status }])
      continue
    }
    if (row.owner_disabled_at !== null && row.owner_disabled_at !== undefined) {
      answers.push([waiter, { ok: false, reason: 'user_disabled' }])
      continue
    }
    if (!key.last_used_at || waiter.now.getTime() - key.last_used_at.getTime() >= LAST_USED_RESOLUTION_MS) {
      stale.add(key.id)
      latest = Math.max(latest, waiter.now.getTime())
      key.last_used_at = waiter.now
    }
    const owner = userFromRow({
      id: key.user_id,
      email: row.owner_email,
      wallet_address: row.owner_wallet_address,
      wallet_type: row.owner_wallet_type,
      wallet_public_key: null,
      external_auth_id: row.owner_external_auth_id,
      is_admin: row.owner_is_admin,
      disabled_at: null,
      created_at: row.owner_created_at,
      updated_at: row.owner_updated_at,
    })
    answers.push([waiter, { ok: true, apiKey: key, owner }])
  }
  if (stale.size > 0) {
    // The condition in the UPDATE keeps concurrent processes from all writing it. Best effort: the
    // column is informational, a failure (a busy SQLite, a pool timeout) must not refuse the batch's
    // requests, and the next request after it finds the key stale and writes again.
    const now = new Date(latest)
    const staleBefore = new Date(latest - LAST_USED_RESOLUTION_MS)
    const ids = [...stale]
    try {
      for (let i = 0; i < ids.length; i += MAX_HASHES_PER_QUERY) {
        await db('api_keys')
          .whereIn('id', ids.slice(i, i + MAX_HASHES_PER_QUERY))
          .andWhere((q) => q.whereNull('last_used_at').orWhere('last_used_at', '<=', staleBefore))
          .update({ last_used_at: now })
      }
    } catch {
      // See above.
    }
  }
  for (const [waiter, answer] of answers) waiter.resolve(answer)
}

// One batcher per database handle (a knex instance, or a transaction for the lookups made in it).
const lookups = new WeakMap<Queryable, TurnBatches<KeyWaiter>>()

/**
 * Looks up the key matching `plaintext` together with its owner (one query, shared with the
 * lookups of the same turn of the event loop: src/db/turn-batches.ts), and keeps `last_used_at` current
 * without a write on every request: at most one update per key per LAST_USED_RESOLUTION_MS, and
 * the condition is in the UPDATE so concurrent requests of one key do not all write. The hash is
 * compared in constant time.
 */
export async function checkApiKey(db: Queryable, plaintext: string, now: Date = new Date()): Promise<ApiKeyCheck> {
  if (!KEY_SHAPE.test(plaintext)) return { ok: false, reason: 'malformed' }
  let batches = lookups.get(db)
  if (!batches) {
    batches = new TurnBatches((batch) => answerBatch(db, batch))
    lookups.set(db, batches)
  }
  const hash = hashApiKey(plaintext)
  return new Promise((resolve, reject) => batches.add({ hash, now, resolve, reject }))
}

/**
 * The active key matching `plaintext`, or undefined (unknown, malformed, revoked, expired or
 * deleted: the caller answers 401 alike).
 */
export async function authenticateApiKey(db: Queryable, plaintext: string, now: Date = new Date()): Promise<ApiKey | undefined> {
  const result = await checkApiKey(db, plaintext, now)
  return result.ok ? result.apiKey : undefined
}
