/**
 * Scopes as the control-plane spec lists them (API key resource), plus `nodes:rpc` (issue 18). `*` grants every
 * scope except `admin`, which only the backend grants (a user flag set by an operator).
 */
export const API_KEY_SCOPES = [
  'nodes:read',
  'nodes:write',
  /** Calling a node's JSON-RPC endpoint through the rpc-gateway (docs/rpc-gateway.md); not implied by nodes:read or nodes:write. */
  'nodes:rpc',
  'subscriptions:read',
  'subscriptions:write',
  'chains:read',
  'keys:export',
  'payments:read',
  'payments:write',
  'api-keys:manage',
  '*',
] as const
export type ApiKeyScope = (typeof API_KEY_SCOPES)[number]

export const ADMIN_SCOPE = 'admin'
export type Scope = ApiKeyScope | typeof ADMIN_SCOPE

/** The scopes of a normal user (every one but admin); JWT callers get these. */
export const USER_SCOPES: readonly Scope[] = API_KEY_SCOPES.filter((s) => s !== '*')

export function isApiKeyScope(value: string): value is ApiKeyScope {
  return (API_KEY_SCOPES as readonly string[]).includes(value)
}

export function hasScope(granted: readonly string[], required: string): boolean {
  if (granted.includes(required)) return true
  return required !== ADMIN_SCOPE && granted.includes('*')
}

/** Whose records a caller sees: an `admin` credential every user's, anyone else only their own. */
export type Visibility = { kind: 'owner'; userId: string } | { kind: 'all' }

export function visibilityFor(scopes: readonly string[], userId: string): Visibility {
  return hasScope(scopes, ADMIN_SCOPE) ? { kind: 'all' } : { kind: 'owner', userId }
}
