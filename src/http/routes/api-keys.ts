/**
 * `/api/v1/api-keys` (scope `api-keys:manage`): a caller manages their own keys. Another user's
 * key answers 404, exactly like a key that does not exist. The plaintext key appears only in the
 * answers of creation and rotation; no answer ever carries the hash.
 */
import {
  apiKeyFromRow,
  apiKeyStatus,
  createApiKey,
  deleteApiKey,
  getApiKey,
  MAX_ACTIVE_KEYS_PER_USER,
  MAX_KEY_NAME_LENGTH,
  MIN_KEY_LIFETIME_MS,
  revokeApiKey,
  rotateApiKey,
  type ApiKey,
  type ApiKeyRow,
  type IssuedApiKey,
} from '../../auth/api-keys.js'
import { ADMIN_SCOPE, API_KEY_SCOPES, hasScope, isApiKeyScope, USER_SCOPES } from '../../auth/scopes.js'
import type { Db } from '../../db/knex.js'
import { ForbiddenError, ValidationError } from '../../errors.js'
import type { Principal } from '../context.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, NO_STORE, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface ApiKeyRouteDeps {
  db: Db
  now?: () => Date
}

const SCOPE = { scope: 'api-keys:manage' } as const
const TAGS = ['api-keys']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const apiKeyView = z
  .object({
    id: z.string().uuid(),
    name: z.string(),
    key_prefix: z.string().openapi({ description: 'First characters of the key, to recognise it', example: 'np_Ab3dE9x' }),
    scopes: z.array(z.string()),
    expires_at: timestamp.nullable(),
    revoked_at: timestamp.nullable(),
    last_used_at: timestamp.nullable().openapi({ description: 'Updated at most once a minute' }),
    created_at: timestamp,
    status: z.enum(['active', 'revoked', 'expired']),
  })
  .openapi('ApiKey')

const issuedKey = z
  .object({
    id: z.string().uuid(),
    name: z.string(),
    key_prefix: z.string(),
    scopes: z.array(z.string()),
    expires_at: timestamp.nullable(),
    created_at: timestamp,
    key: z.string().openapi({ description: 'The plaintext key. Shown only in this answer: store it now.', example: 'np_…' }),
  })
  .openapi('IssuedApiKey')

const scopeList = z
  .array(z.string().max(64))
  .min(1, 'at least one scope is required')
  .max(API_KEY_SCOPES.length * 2)
  .superRefine((scopes, ctx) => {
    scopes.forEach((scope, i) => {
      if (scope === ADMIN_SCOPE) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, path: [i], message: 'admin cannot be given to an API key through the API (an operator uses `nodeplane api-key issue --admin`)' })
      } else if (!isApiKeyScope(scope)) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, path: [i], message: `unknown scope "${scope}"; known: ${API_KEY_SCOPES.join(', ')}` })
      }
    })
  })
  .openapi({ description: `Any of ${API_KEY_SCOPES.join(', ')}; \`admin\` is refused` })

const createBody = z
  .object({
    name: z.string().trim().min(1, 'must not be empty').max(MAX_KEY_NAME_LENGTH),
    scopes: scopeList,
    expires_at: z
      .string()
      .datetime({ offset: true, message: 'must be an ISO 8601 date-time, e.g. 2030-01-31T12:00:00Z' })
      .nullable()
      .optional()
      .openapi({ description: 'When the key stops working; at least 1 hour ahead. Omit for a key without expiry.' }),
  })
  .openapi('NewApiKey')

const idParams = z.object({ id: z.string().uuid('must be an API key id (UUID)') })

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null)

function view(key: ApiKey, now: Date): z.input<typeof apiKeyView> {
  const status = apiKeyStatus(key, now)
  return {
    id: key.id,
    name: key.name,
    key_prefix: key.key_prefix,
    scopes: key.scopes,
    expires_at: iso(key.expires_at),
    revoked_at: iso(key.revoked_at),
    last_used_at: iso(key.last_used_at),
    created_at: key.created_at.toISOString(),
    status: status === 'deleted' ? 'revoked' : status,
  }
}

function issued({ apiKey, key }: IssuedApiKey): z.input<typeof issuedKey> {
  return {
    id: apiKey.id,
    name: apiKey.name,
    key_prefix: apiKey.key_prefix,
    scopes: apiKey.scopes,
    expires_at: iso(apiKey.expires_at),
    created_at: apiKey.created_at.toISOString(),
    key,
  }
}

/** Every column but the hash. */
const LISTED_COLUMNS = ['id', 'user_id', 'name', 'key_prefix', 'scopes', 'expires_at', 'revoked_at', 'last_used_at', 'deleted_at', 'rotated_from_id', 'created_at'] as const

const WILDCARD = '*'

/**
 * A credential cannot hand out more than it holds: an API key may create (or, by rotating, obtain
 * a fresh copy of) a key only with scopes it has itself, so a key limited to `api-keys:manage`
 * cannot mint a `*` key. JWT callers hold every scope of their user, which amounts to `*`.
 */

function assertCanGrant(principal: Principal, scopes: readonly string[]): void {
  const holds = (scope: string) =>
    hasScope(principal.scopes, scope) || (scope === WILDCARD && USER_SCOPES.every((s) => hasScope(principal.scopes, s)))
  const missing = scopes.filter((scope) => !holds(scope))
  if (missing.length > 0) {
    throw new ForbiddenError('forbidden', `your credential lacks ${missing.map((s) => `"${s}"`).join(', ')}; a key cannot be given scopes its creator does not hold`)
  }
}

export function apiKeyRoutes(deps: ApiKeyRouteDeps): ApiRoute[] {
  const now = deps.now ?? (() => new Date())
  const { db } = deps
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/api-keys',
      summary: 'Create an API key (the plaintext is shown once)',
      tags: TAGS,
      auth: SCOPE,
      request: { body: createBody },
      responses: {
        201: issuedKey,
        403: errorResponse('The credential lacks api-keys:manage, or a scope it asks to give'),
        409: errorResponse(`The caller already has ${MAX_ACTIVE_KEYS_PER_USER} active keys`),
      },
    }).handle(async ({ body, principal }) => {
      const at = now()
      const expiresAt = body.expires_at ? new Date(body.expires_at) : null
      if (expiresAt && expiresAt.getTime() - at.getTime() < MIN_KEY_LIFETIME_MS) {
        throw new ValidationError('invalid request', 'body.expires_at: must be at least 1 hour in the future')
      }
      assertCanGrant(principal, body.scopes)
      const created = await db.transaction((trx) => createApiKey(trx, { userId: principal.userId, name: body.name, scopes: body.scopes, expiresAt }, at))
      return { status: 201, body: issued(created), headers: NO_STORE }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/api-keys',
      summary: "List the caller's API keys, newest first (never the key itself)",
      tags: TAGS,
      auth: SCOPE,
      request: { query: paginationQuery },
      responses: { 200: pageSchema(apiKeyView).openapi('ApiKeyPage') },
    }).handle(async ({ query, principal }) => {
      const at = now()
      const page = await paginateKeyset(db, db('api_keys').where({ user_id: principal.userId }).whereNull('deleted_at'), {
        sortColumn: 'created_at',
        direction: 'desc',
        limit: query.limit,
        cursor: query.cursor,
        columns: LISTED_COLUMNS,
        map: (row) => view(apiKeyFromRow(row as ApiKeyRow), at),
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/api-keys/{id}',
      summary: 'One API key of the caller',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams },
      responses: { 200: apiKeyView, 404: errorResponse('No such key, or not yours') },
    }).handle(async ({ params, principal }) => ({ status: 200, body: view(await getApiKey(db, principal.userId, params.id), now()) })),

    defineRoute({
      method: 'post',
      path: '/api/v1/api-keys/{id}/rotate',
      summary: 'Replace a key: a new key with the same name, scopes and expiry; the old one is revoked at once',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams },
      responses: {
        201: issuedKey,
        403: errorResponse('The credential lacks api-keys:manage, or a scope of the key it rotates'),
        404: errorResponse('No such key, or not yours'),
        409: errorResponse('The key is revoked or expired (only an active key can be rotated)'),
      },
    }).handle(async ({ params, principal }) => {
      const at = now()
      const rotated = await db.transaction(async (trx) => {
        assertCanGrant(principal, (await getApiKey(trx, principal.userId, params.id)).scopes)
        return rotateApiKey(trx, principal.userId, params.id, at)
      })
      return { status: 201, body: issued(rotated), headers: NO_STORE }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/api-keys/{id}/revoke',
      summary: 'Revoke a key (it stops working at once; revoking twice is harmless)',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams },
      responses: { 200: apiKeyView, 404: errorResponse('No such key, or not yours') },
    }).handle(async ({ params, principal }) => {
      const at = now()
      return { status: 200, body: view(await revokeApiKey(db, principal.userId, params.id, at), at) }
    }),

    defineRoute({
      method: 'delete',
      path: '/api/v1/api-keys/{id}',
      summary: 'Delete a key (soft delete: it stops working and leaves the listings)',
      tags: TAGS,
      auth: SCOPE,
      request: { params: idParams },
      responses: { 204: { description: 'Deleted' }, 404: errorResponse('No such key, or not yours') },
    }).handle(async ({ params, principal }) => {
      await deleteApiKey(db, principal.userId, params.id, now())
      return { status: 204 }
    }),
  ]
}
