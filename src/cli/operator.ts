/**
 * What the operator commands do to users and API keys, directly on the database. Only here may
 * a key get the `admin` scope (issue 3: "admin only from the backend"), and only for a user whose
 * admin flag an operator has set.
 */
import { createApiKey, listApiKeys, revokeApiKey, type IssuedApiKey } from '../auth/api-keys.js'
import { ADMIN_SCOPE } from '../auth/scopes.js'
import { createUser, findUserByEmail, resolveUser, setAdmin, type User } from '../auth/users.js'
import type { Db, Queryable } from '../db/knex.js'
import { ConflictError, ValidationError } from '../errors.js'

export interface OperatorKeyRequest {
  userRef: string
  name: string
  scopes: readonly string[]
  /** Adds the `admin` scope; the user must be an admin. */
  admin: boolean
  expiresAt: Date | null
}

export async function issueApiKey(db: Db, request: OperatorKeyRequest, now: Date = new Date()): Promise<{ user: User; issued: IssuedApiKey }> {
  if (request.scopes.includes(ADMIN_SCOPE)) {
    throw new ValidationError('scopes: "admin" is given with --admin, not in --scopes', 'the user must be an admin (`nodeplane user grant-admin`)')
  }
  return db.transaction(async (trx) => {
    const user = await resolveUser(trx, request.userRef)
    if (request.admin && !user.is_admin) {
      throw new ConflictError(
        `${user.email ?? user.id} is not an admin, so an admin key cannot be issued for it`,
        `grant it first: nodeplane user grant-admin --user ${user.email ?? user.id}`,
      )
    }
    const scopes = request.admin ? [...request.scopes, ADMIN_SCOPE] : [...request.scopes]
    const issued = await createApiKey(trx, { userId: user.id, name: request.name, scopes, expiresAt: request.expiresAt, allowAdmin: request.admin }, now)
    return { user, issued }
  })
}

export const LOCAL_OPERATOR_EMAIL = 'operator@localhost'
export const LOCAL_OPERATOR_KEY_NAME = 'nodeplane up'

/**
 * `nodeplane up`'s operator: the user `operator@localhost` with admin (created or re-flagged
 * on every start) and one fresh admin key named "nodeplane up". Earlier keys of that name are
 * revoked in the same transaction, so exactly one stays active however often `up` restarts.
 */
export async function ensureLocalOperator(db: Db, now: Date = new Date()): Promise<{ user: User; issued: IssuedApiKey; revoked: number }> {
  return db.transaction(async (trx) => {
    const user = await ensureAdminUser(trx, LOCAL_OPERATOR_EMAIL, now)
    let revoked = 0
    for (const key of await listApiKeys(trx, user.id)) {
      if (key.name === LOCAL_OPERATOR_KEY_NAME && key.revoked_at === null) {
        await revokeApiKey(trx, user.id, key.id, now)
        revoked++
      }
    }
    const issued = await createApiKey(trx, { userId: user.id, name: LOCAL_OPERATOR_KEY_NAME, scopes: ['*', ADMIN_SCOPE], allowAdmin: true }, now)
    return { user, issued, revoked }
  })
}

async function ensureAdminUser(trx: Queryable, email: string, now: Date): Promise<User> {
  const existing = await findUserByEmail(trx, email)
  if (!existing) return createUser(trx, { email, is_admin: true }, now)
  // Only the local operator this command made may be promoted: never a user who arrived through
  // the identity provider or a wallet sign-in with the same address.
  if (existing.external_auth_id !== null || existing.wallet_address !== null) {
    throw new ConflictError(
      `${email} belongs to a user who signed up through the identity provider or a wallet`,
      'remove or rename that user, or use another data directory',
    )
  }
  return existing.is_admin ? existing : setAdmin(trx, existing.id, true, now)
}
