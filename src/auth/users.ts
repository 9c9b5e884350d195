/** Users: one exported function per database operation; the caller owns the transaction. */
import type { Queryable } from '../db/knex.js'
import { toBool, toDate, toDateOrNull } from '../db/dialect.js'
import { isUniqueViolation } from '../db/errors.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'

export interface User {
  id: string
  email: string | null
  wallet_address: string | null
  wallet_type: 'ethereum' | 'solana' | null
  external_auth_id: string | null
  is_admin: boolean
  /** Set by an operator (`nodeplane user disable`): every key and token of the user is refused. */
  disabled_at: Date | null
  created_at: Date
  updated_at: Date
}

export type UserRow = Record<Exclude<keyof User, 'disabled_at'> | 'wallet_public_key', unknown> & { disabled_at?: unknown }

export function userFromRow(row: UserRow): User {
  return {
    id: String(row.id),
    email: (row.email as string | null) ?? null,
    wallet_address: (row.wallet_address as string | null) ?? null,
    wallet_type: (row.wallet_type as User['wallet_type']) ?? null,
    external_auth_id: (row.external_auth_id as string | null) ?? null,
    is_admin: toBool(row.is_admin),
    disabled_at: toDateOrNull(row.disabled_at),
    created_at: toDate(row.created_at),
    updated_at: toDate(row.updated_at),
  }
}

const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}$/
export interface NewUser {
  email?: string | null
  external_auth_id?: string | null
  is_admin?: boolean
}

export async function createUser(db: Queryable, user: NewUser, now: Date = new Date()): Promise<User> {
  const email = user.email?.trim() || null
  if (email !== null && !EMAIL.test(email)) throw new ValidationError(`"${email.slice(0, 80)}" is not an email address`)
  const row = {
    id: uuidv7(now.getTime()),
    email,
    external_auth_id: user.external_auth_id ?? null,
    is_admin: user.is_admin ?? false,
    created_at: now,
    updated_at: now,
  }
  try {
    await db('users').insert(row)
  } catch (err) {
    if (isUniqueViolation(err)) throw new ConflictError('a user with this email or identity already exists', `email ${email ?? '-'}`)
    throw err
  }
  return userFromRow({ ...row, wallet_address: null, wallet_type: null, wallet_public_key: null })
}

export async function findUserById(db: Queryable, id: string): Promise<User | undefined> {
  if (!isUuid(id)) return undefined
  const row = await db('users').where({ id }).first()
  return row ? userFromRow(row as UserRow) : undefined
}

export async function findUserByEmail(db: Queryable, email: string): Promise<User | undefined> {
  const row = await db('users').whereRaw('lower(email) = lower(?)', [email.trim()]).first()
  return row ? userFromRow(row as UserRow) : undefined
}

export async function findUserByExternalAuthId(db: Queryable, externalAuthId: string): Promise<User | undefined> {
  const row = await db('users').where({ external_auth_id: externalAuthId }).first()
  return row ? userFromRow(row as UserRow) : undefined
}

/** Ethereum addresses match in any letter case; Solana (base58) addresses exactly. */
export async function findUserByWalletAddress(db: Queryable, address: string): Promise<User | undefined> {
  const query = /^0x[0-9a-fA-F]{40}$/.test(address)
    ? db('users').where({ wallet_type: 'ethereum' }).whereRaw('lower(wallet_address) = lower(?)', [address])
    : db('users').whereNot({ wallet_type: 'ethereum' }).where({ wallet_address: address })
  const row = await query.first()
  return row ? userFromRow(row as UserRow) : undefined
}

/** An operator names a user by id or by email. */
export async function resolveUser(db: Queryable, idOrEmail: string): Promise<User> {
  const user = isUuid(idOrEmail) ? await findUserById(db, idOrEmail) : await findUserByEmail(db, idOrEmail)
  if (!user) throw new NotFoundError(`no user ${idOrEmail}`, 'list users with `nodeplane user list`')
  return user
}

export async function setAdmin(db: Queryable, userId: string, isAdmin: boolean, now: Date = new Date()): Promise<User> {
  const updated = await db('users').where({ id: userId }).update({ is_admin: isAdmin, updated_at: now })
  if (updated !== 1) throw new NotFoundError(`no user ${userId}`)
  return (await findUserById(db, userId)) as User
}

export async function listUsers(db: Queryable): Promise<User[]> {
  const rows = await db('users').orderBy('created_at').orderBy('id')
  return rows.map((r) => userFromRow(r as UserRow))
}

export interface DisableChange {
  user: User
  changed: boolean
  /** Refresh tokens revoked by disabling (sessions do not come back on enable). */
  revokedRefreshTokens: number
}

/**
 * Disables or enables a user (docs/auth.md, "Disabled users"), in the caller's transaction.
 * Disabling revokes every active refresh token of the user, so enabling later does not bring old
 * sessions back; API keys are left as they are (refused while the user is disabled, working again
 * once enabled) so an operator can undo a mistaken disable without reissuing every key.
 */
export async function setUserDisabled(db: Queryable, userId: string, disabled: boolean, now: Date): Promise<DisableChange> {
  const before = await findUserById(db, userId)
  if (!before) throw new NotFoundError(`no user ${userId}`)
  const changed = (before.disabled_at !== null) !== disabled
  let revokedRefreshTokens = 0
  if (changed) {
    await db('users').where({ id: userId }).update({ disabled_at: disabled ? now : null, updated_at: now })
  }
  if (disabled) {
    revokedRefreshTokens = Number(await db('refresh_tokens').where({ user_id: userId }).whereNull('revoked_at').update({ revoked_at: now }))
  }
  return { user: (await findUserById(db, userId)) as User, changed, revokedRefreshTokens }
}
