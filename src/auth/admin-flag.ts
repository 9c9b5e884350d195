/** A user's admin flag, as operators move it (`user grant-admin|revoke-admin`, the admin API). */
import type { Db } from '../db/knex.js'
import { isActive, listApiKeys, revokeApiKey } from './api-keys.js'
import { ADMIN_SCOPE } from './scopes.js'
import { resolveUser, setAdmin, type User } from './users.js'

export interface AdminChange {
  user: User
  /** False when the user already had (or lacked) the flag. */
  changed: boolean
  /** Keys carrying `admin` revoked because their user lost the flag. */
  revokedAdminKeys: string[]
}

/**
 * Sets or clears a user's admin flag. Clearing it also revokes the user's active keys that
 * carry the `admin` scope, in the same transaction: a key must not keep powers its user lost.
 * `guard` runs inside the transaction on the user found, before any write (a refusal leaves
 * nothing changed).
 */
export async function changeAdmin(db: Db, userRef: string, isAdmin: boolean, now: Date = new Date(), guard?: (user: User) => void): Promise<AdminChange> {
  return db.transaction(async (trx) => {
    const before = await resolveUser(trx, userRef)
    guard?.(before)
    const user = before.is_admin === isAdmin ? before : await setAdmin(trx, before.id, isAdmin, now)
    const revokedAdminKeys: string[] = []
    if (!isAdmin) {
      for (const key of await listApiKeys(trx, user.id)) {
        if (isActive(key, now) && key.scopes.includes(ADMIN_SCOPE)) {
          await revokeApiKey(trx, user.id, key.id, now)
          revokedAdminKeys.push(key.id)
        }
      }
    }
    return { user, changed: before.is_admin !== isAdmin, revokedAdminKeys }
  })
}
