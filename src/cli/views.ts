/**
 * The `--json` contracts of the user and API key commands, and the API's answers they build on.
 * Timestamps are ISO 8601 strings (UTC), field names snake_case as in the API.
 */
import type { ApiKey } from '../auth/api-keys.js'

export { toUserView, type UserView } from '../auth/user-view.js'

/** A newly issued key: the only time its plaintext is shown. */
export interface IssuedKeyView {
  id: string
  key: string
  scopes: string[]
  expires_at: string | null
}

export function toIssuedKeyView(apiKey: ApiKey, key: string): IssuedKeyView {
  return { id: apiKey.id, key, scopes: [...apiKey.scopes], expires_at: apiKey.expires_at?.toISOString() ?? null }
}

/** `GET /api/v1/me`. */
export interface Me {
  user_id: string
  email: string | null
  is_admin: boolean
  scopes: string[]
  auth_method: string
  api_key_id?: string
}

/** An API key as the API lists it (never the key nor its hash). */
export interface ApiKeyItem {
  id: string
  name: string
  key_prefix: string
  scopes: string[]
  expires_at: string | null
  created_at: string
  revoked_at?: string | null
  last_used_at?: string | null
  rotated_from_id?: string | null
  status?: string
}

/** `POST /api/v1/api-keys` and `POST /api/v1/api-keys/{id}/rotate`. */
export interface CreatedApiKey extends ApiKeyItem {
  key: string
}

export interface Page<T> {
  items: T[]
  next_cursor: string | null
}

export type ApiKeyStatus = 'active' | 'revoked' | 'expired'

/** The server's `status` when it sends one, else derived from the timestamps. */
export function apiKeyStatus(item: ApiKeyItem, now: Date = new Date()): string {
  if (item.status) return item.status
  if (item.revoked_at) return 'revoked'
  if (item.expires_at && Date.parse(item.expires_at) <= now.getTime()) return 'expired'
  return 'active'
}

export function fromCreatedApiKey(created: CreatedApiKey): IssuedKeyView {
  return { id: created.id, key: created.key, scopes: created.scopes, expires_at: created.expires_at ?? null }
}

/** `POST /api/v1/admin/users/{user}/disable|enable` (user disable / enable). */
export interface AdminUserView {
  id: string
  email: string | null
  is_admin: boolean
  disabled_at: string | null
  changed: boolean
  revoked_refresh_tokens: number
}

/** `POST /api/v1/admin/api-keys/{id}/revoke` (user revoke-key). */
export interface AdminRevokedKeyView {
  id: string
  user_id: string
  name: string
  key_prefix: string
  revoked_at: string
}
