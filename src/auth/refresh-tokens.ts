/**
 * Refresh tokens of the legacy wallet path (spec: "Refresh token": SHA-256 hash at rest, 7 day
 * lifetime, refresh revokes the old token and creates the new one atomically, several active
 * per user).
 *
 * The plaintext is `npr_` + 43 base64url characters (32 random bytes); the prefix lets secret
 * scanners find leaked ones and tells them apart from API keys (`np_`). Only its SHA-256 is
 * stored. Each rotation links the old row to its successor (`replaced_by_id`), so the tokens of
 * one sign-in form a chain. Presenting a token that was already rotated means two parties hold
 * the same chain (the client and a thief; which is which cannot be told), so the whole chain
 * from that token on is revoked and the user signs in again.
 */
import crypto from 'node:crypto'
import type { Db, Queryable } from '../db/knex.js'
import { lockRow, toDate, toDateOrNull } from '../db/dialect.js'
import { uuidv7 } from '../db/ids.js'
import { UnauthorizedError } from '../errors.js'

export const REFRESH_TOKEN_PREFIX = 'npr_'
export const DEFAULT_REFRESH_TOKEN_TTL_MS = 7 * 24 * 3_600_000
const TOKEN_SHAPE = /^npr_[A-Za-z0-9_-]{43}$/

export interface RefreshTokenRecord {
  id: string
  user_id: string
  replaced_by_id: string | null
  created_at: Date
  expires_at: Date
  revoked_at: Date | null
}

type RefreshTokenRow = Record<keyof RefreshTokenRecord | 'token_hash', unknown>

function recordFromRow(row: RefreshTokenRow): RefreshTokenRecord {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    replaced_by_id: (row.replaced_by_id as string | null) ?? null,
    created_at: toDate(row.created_at),
    expires_at: toDate(row.expires_at),
    revoked_at: toDateOrNull(row.revoked_at),
  }
}

export interface IssuedRefreshToken {
  /** The plaintext: returned to the client once, never stored or logged. */
  token: string
  record: RefreshTokenRecord
}

export function hashRefreshToken(plaintext: string): string {
  return crypto.createHash('sha256').update(plaintext, 'utf8').digest('hex')
}

export function looksLikeRefreshToken(value: string): boolean {
  return TOKEN_SHAPE.test(value)
}

/** Inserts a new token for the user, in the caller's transaction. */
export async function createRefreshToken(db: Queryable, userId: string, ttlMs: number, now: Date): Promise<IssuedRefreshToken> {
  const token = `${REFRESH_TOKEN_PREFIX}${crypto.randomBytes(32).toString('base64url')}`
  const record: RefreshTokenRecord = {
    id: uuidv7(now.getTime()),
    user_id: userId,
    replaced_by_id: null,
    created_at: now,
    expires_at: new Date(now.getTime() + ttlMs),
    revoked_at: null,
  }
  await db('refresh_tokens').insert({ ...record, token_hash: hashRefreshToken(token) })
  return { token, record }
}

/**
 * Revokes every still-active token descending from `id` through `replaced_by_id` (not `id`
 * itself); returns how many. One recursive statement, on both databases.
 */
export async function revokeDescendants(db: Queryable, id: string, now: Date): Promise<number> {
  const result = (await db.raw(
    `WITH RECURSIVE chain(id) AS (
       SELECT replaced_by_id FROM refresh_tokens WHERE id = ? AND replaced_by_id IS NOT NULL
       UNION
       SELECT r.replaced_by_id FROM refresh_tokens r JOIN chain c ON r.id = c.id WHERE r.replaced_by_id IS NOT NULL
     )
     UPDATE refresh_tokens SET revoked_at = ? WHERE id IN (SELECT id FROM chain) AND revoked_at IS NULL`,
    [id, now],
  )) as { rowCount?: number; changes?: number }
  return Number(result.rowCount ?? result.changes ?? 0)
}

export interface RotatedRefreshToken extends IssuedRefreshToken {
  userId: string
}

export type RefusalReason = 'unknown' | 'expired' | 'revoked' | 'reused'

export type RotationOutcome =
  | { ok: true; rotated: RotatedRefreshToken }
  | { ok: false; reason: RefusalReason; revokedDescendants: number }

/**
 * Rotates a refresh token in one transaction: the presented token's row is locked and revoked
 * (`WHERE revoked_at IS NULL`, exactly one row), its successor inserted and linked. A refusal is
 * reported, not thrown, because the theft defence must commit: a replayed (already rotated)
 * token revokes the rest of its chain, and only then is the caller refused
 * (`refreshTokenRefusal(outcome.reason)`). This function owns its transaction for that reason.
 */
export async function rotateRefreshToken(db: Db, plaintext: string, ttlMs: number, now: Date): Promise<RotationOutcome> {
  if (!looksLikeRefreshToken(plaintext)) return { ok: false, reason: 'unknown', revokedDescendants: 0 }
  const tokenHash = hashRefreshToken(plaintext)
  return db.transaction(async (trx): Promise<RotationOutcome> => {
    // Postgres: a concurrent rotation of the same token waits here, then sees it revoked and
    // replaced, and is handled as the replay it is. SQLite has a single writer already.
    const row = (await lockRow(trx, trx('refresh_tokens').where({ token_hash: tokenHash }).first())) as RefreshTokenRow | undefined
    if (!row) return { ok: false, reason: 'unknown', revokedDescendants: 0 }
    const current = recordFromRow(row)
    if (current.revoked_at !== null) {
      if (current.replaced_by_id === null) return { ok: false, reason: 'revoked', revokedDescendants: 0 }
      return { ok: false, reason: 'reused', revokedDescendants: await revokeDescendants(trx, current.id, now) }
    }
    if (current.expires_at <= now) return { ok: false, reason: 'expired', revokedDescendants: 0 }

    const next = await createRefreshToken(trx, current.user_id, ttlMs, now)
    const revoked = await trx('refresh_tokens')
      .where({ id: current.id })
      .whereNull('revoked_at')
      .update({ revoked_at: now, replaced_by_id: next.record.id })
    // Cannot happen under the row lock / single writer; if it did, the insert must not survive.
    if (Number(revoked) !== 1) throw refreshTokenRefusal('reused')
    return { ok: true, rotated: { ...next, userId: current.user_id } }
  })
}

/**
 * Logout: revokes the token and whatever descends from it (the whole rest of its chain), so
 * logging out with any token of a sign-in ends that sign-in. Unknown or already revoked tokens
 * change nothing; the caller answers the same either way. Returns the number of rows revoked.
 */
export async function revokeRefreshToken(db: Db, plaintext: string, now: Date): Promise<number> {
  if (!looksLikeRefreshToken(plaintext)) return 0
  return db.transaction(async (trx) => {
    const row = (await trx('refresh_tokens').where({ token_hash: hashRefreshToken(plaintext) }).first()) as RefreshTokenRow | undefined
    if (!row) return 0
    const own = await trx('refresh_tokens').where({ id: row.id }).whereNull('revoked_at').update({ revoked_at: now })
    return Number(own) + (await revokeDescendants(trx, String(row.id), now))
  })
}

/** Housekeeping: deletes tokens expired more than `graceMs` ago; returns how many. */
export async function purgeExpiredRefreshTokens(db: Queryable, now: Date, graceMs: number): Promise<number> {
  return Number(await db('refresh_tokens').where('expires_at', '<=', new Date(now.getTime() - graceMs)).del())
}

/** The 401 a refused rotation answers. */
export function refreshTokenRefusal(reason: RefusalReason): UnauthorizedError {
  const details: Record<RefusalReason, string> = {
    unknown: 'the refresh token is not known; sign in again',
    expired: 'the refresh token expired; sign in again',
    revoked: 'the refresh token was revoked; sign in again',
    reused: 'the refresh token was already used; as a precaution every token of this sign-in is revoked; sign in again',
  }
  return new UnauthorizedError('invalid refresh token', details[reason])
}
