/**
 * Who calls a node's endpoint (docs/rpc-gateway.md, "Authentication"): an API key in
 * `X-API-Key`, `Authorization: Bearer`, or the last path segment (`/v1/{node_id}/{key}`, for
 * clients that take only a URL). The key is checked by the same code as the API's
 * (src/auth/api-keys.ts: hash lookup, constant-time compare, revocation, expiry, `last_used_at`
 * throttle) on every request, so a revoked key stops on its next call. JWTs are not taken here:
 * an endpoint URL is long-lived configuration, a 15-minute token is not.
 */
import { checkApiKey, looksLikeApiKey, type ApiKeyRejection } from '../auth/api-keys.js'
import { credentialOf } from '../auth/authenticator.js'
import { ADMIN_SCOPE, hasScope } from '../auth/scopes.js'
import type { Queryable } from '../db/knex.js'
import { DomainError } from '../errors.js'

export const RPC_SCOPE = 'nodes:rpc'

export interface RpcCaller {
  userId: string
  apiKeyId: string
}

export type CallerCheck = { ok: true; caller: RpcCaller } | { ok: false; status: 401 | 403; message: string }

// Keyed by string: a rejection reason added in src/auth is still refused, with the generic message.
const REFUSED: Readonly<Record<string, string>> = {
  malformed: 'the API key is malformed',
  unknown: 'the API key is not known',
  revoked: 'the API key has been revoked',
  expired: 'the API key has expired',
  deleted: 'the API key has been deleted',
  user_disabled: "the API key's owner is disabled",
}

function refusal(reason: ApiKeyRejection): string {
  return REFUSED[reason] ?? 'the API key is not valid'
}

function headerKey(headers: Record<string, string | string[] | undefined>): { key?: string; error?: string } {
  if (headers.authorization === undefined && headers['x-api-key'] === undefined) return {}
  try {
    const credential = credentialOf(headers)
    if (credential.kind !== 'api_key') return { error: 'this endpoint takes API keys (np_...), not tokens' }
    return { key: credential.value }
  } catch (err) {
    if (err instanceof DomainError) return { error: `${err.message}: ${err.details}` }
    throw err
  }
}

export async function identifyCaller(db: Queryable, headers: Record<string, string | string[] | undefined>, pathKey: string | undefined, now: Date): Promise<CallerCheck> {
  const fromHeaders = headerKey(headers)
  if (fromHeaders.error) return { ok: false, status: 401, message: `unauthorized: ${fromHeaders.error}` }
  if (pathKey !== undefined && !looksLikeApiKey(pathKey)) return { ok: false, status: 401, message: 'unauthorized: the key in the path is not an API key (np_...)' }
  if (pathKey !== undefined && fromHeaders.key !== undefined && fromHeaders.key !== pathKey) {
    return { ok: false, status: 401, message: 'unauthorized: send one API key: the path and the headers disagree' }
  }
  const key = pathKey ?? fromHeaders.key
  if (key === undefined) {
    return { ok: false, status: 401, message: 'unauthorized: no API key: send "X-API-Key: <key>", "Authorization: Bearer <key>" or use {endpoint}/<key>' }
  }
  const result = await checkApiKey(db, key, now)
  if (!result.ok) return { ok: false, status: 401, message: `unauthorized: ${refusal(result.reason)}` }
  // `admin` never grants RPC (hasScope), and a key's scopes are all it has.
  const scopes = result.apiKey.scopes.filter((s) => s !== ADMIN_SCOPE)
  if (!hasScope(scopes, RPC_SCOPE)) return { ok: false, status: 403, message: `forbidden: this API key lacks the scope "${RPC_SCOPE}"` }
  return { ok: true, caller: { userId: result.owner.id, apiKeyId: result.apiKey.id } }
}
