/**
 * `user grant-admin|revoke-admin`: the admin flag over the admin API, or on the database with
 * `--direct-db` (break-glass: the only way to take the flag from the last admin, or from
 * yourself). Both answer the same `--json`.
 */
import { changeAdmin } from '../auth/admin-flag.js'
import type { Env } from '../config/env.js'
import { apiClientFor } from './api-flags.js'
import { withControlPlaneDatabase } from './control-plane-db.js'
import { describeUser } from './display.js'
import { resolveApiId, resolveDbId } from './id-prefix.js'
import { toUserView, type UserView } from './views.js'

export interface AdminFlagResult extends UserView {
  changed: boolean
  /** Active keys carrying `admin` revoked because the user lost the flag (revoke-admin). */
  revoked_api_keys: string[]
}

export interface AdminFlagTarget {
  env: Env
  apiUrl: string | undefined
  directDb: boolean
}

export async function setAdminFlag(target: AdminFlagTarget, given: string, isAdmin: boolean): Promise<AdminFlagResult> {
  if (target.directDb) {
    return withControlPlaneDatabase(target.env, async (db) => {
      const change = await changeAdmin(db, await resolveDbId(db, 'users', 'user', 'user list', given), isAdmin)
      return { ...toUserView(change.user), changed: change.changed, revoked_api_keys: change.revokedAdminKeys }
    })
  }
  const api = apiClientFor(target.env, target.apiUrl)
  const user = await resolveApiId(api, 'user', given)
  return api.post<AdminFlagResult>(`/admin/users/${encodeURIComponent(user)}/${isAdmin ? 'grant-admin' : 'revoke-admin'}`)
}

export function describeAdminFlagChange(result: AdminFlagResult, isAdmin: boolean): string[] {
  const who = describeUser(result)
  const lines = [isAdmin ? (result.changed ? `${who} is now an admin` : `${who} was already an admin`) : result.changed ? `${who} is no longer an admin` : `${who} was not an admin`]
  if (result.revoked_api_keys.length > 0) lines.push(`Revoked its admin API keys: ${result.revoked_api_keys.join(', ')}`)
  return lines
}
