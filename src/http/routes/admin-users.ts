/**
 * Operator actions on other users (scope `admin`; docs/auth.md, "Disabled users" and "Operators
 * over the API"):
 *
 * - `GET /api/v1/admin/users`, `POST /api/v1/admin/users`: every user (oldest first); a new user.
 * - `POST /api/v1/admin/users/{user}/grant-admin` and `/revoke-admin`: the admin flag; revoking
 *   it also revokes the user's active keys that carry `admin`, in the same transaction.
 * - `POST /api/v1/admin/users/{user}/disable` and `/enable`: a disabled user's every API key and
 *   token is refused from the next request on; disabling also revokes their refresh tokens.
 * - `POST /api/v1/admin/api-keys/{id}/revoke`: revoke any user's key.
 *
 * `{user}` is a user id or an email, as the operator commands take it.
 */
import { changeAdmin } from '../../auth/admin-flag.js'
import { revokeAnyApiKey } from '../../auth/api-keys.js'
import { toUserView } from '../../auth/user-view.js'
import { createUser, resolveUser, setUserDisabled, userFromRow } from '../../auth/users.js'
import type { Db } from '../../db/knex.js'
import { ConflictError, NotFoundError } from '../../errors.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface AdminUserRouteDeps {
  db: Db
  now?: () => Date
}

const ADMIN = { scope: 'admin' } as const
const TAGS = ['admin']
const timestamp = z.string().openapi({ format: 'date-time' })

const userParams = z.object({
  user: z.string().min(1).max(320).openapi({ description: 'User id (UUID) or email' }),
})

const adminUserView = z
  .object({
    id: z.string().uuid(),
    email: z.string().nullable(),
    is_admin: z.boolean(),
    disabled_at: timestamp.nullable(),
    changed: z.boolean().openapi({ description: 'false when the user already was in that state' }),
    revoked_refresh_tokens: z.number().int().openapi({ description: 'Refresh tokens revoked by this call (disable only)' }),
  })
  .openapi('AdminUser')

const userView = z
  .object({
    id: z.string().uuid(),
    email: z.string().nullable(),
    wallet_address: z.string().nullable(),
    is_admin: z.boolean(),
    disabled_at: timestamp.nullable(),
    created_at: timestamp,
  })
  .openapi('User')

const adminFlagChange = userView
  .extend({
    changed: z.boolean().openapi({ description: 'false when the user already was in that state' }),
    revoked_api_keys: z.array(z.string().uuid()).openapi({ description: 'Active keys carrying admin, revoked because the user lost the flag (revoke-admin only)' }),
  })
  .openapi('AdminFlagChange')

const newUserBody = z
  .object({
    email: z.string().trim().min(1).max(320).openapi({ example: 'ops@example.com' }),
    is_admin: z.boolean().default(false).openapi({ description: 'Make the user an admin (they may then hold admin API keys)' }),
  })
  .strict()

const notFound = (ref: string) => (err: unknown) => {
  throw err instanceof NotFoundError ? new NotFoundError('not found', `no user ${ref.slice(0, 80)}`) : err
}

const revokedKeyView = z
  .object({
    id: z.string().uuid(),
    user_id: z.string().uuid(),
    name: z.string(),
    key_prefix: z.string(),
    revoked_at: timestamp,
  })
  .openapi('AdminRevokedApiKey')

export function adminUserRoutes(deps: AdminUserRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())

  const setDisabled = (disabled: boolean) =>
    defineRoute({
      method: 'post',
      path: `/api/v1/admin/users/{user}/${disabled ? 'disable' : 'enable'}`,
      summary: disabled
        ? 'Disable a user: every key and token of theirs is refused from the next request; their refresh tokens are revoked'
        : 'Enable a disabled user again: their API keys work again; signed-out sessions stay signed out',
      tags: TAGS,
      auth: ADMIN,
      request: { params: userParams },
      responses: {
        200: adminUserView,
        404: errorResponse('No such user'),
        409: errorResponse('An admin cannot disable themselves'),
      },
    }).handle(async ({ params, principal, log }) => {
      const at = now()
      const change = await db.transaction(async (trx) => {
        const user = await resolveUser(trx, params.user).catch(notFound(params.user))
        if (disabled && user.id === principal.userId) {
          throw new ConflictError('cannot disable yourself', 'an admin cannot disable their own user; another admin can')
        }
        return setUserDisabled(trx, user.id, disabled, at)
      })
      log.info({ targetUserId: change.user.id, disabled, changed: change.changed, revokedRefreshTokens: change.revokedRefreshTokens }, disabled ? 'user disabled' : 'user enabled')
      return {
        status: 200,
        body: {
          id: change.user.id,
          email: change.user.email,
          is_admin: change.user.is_admin,
          disabled_at: change.user.disabled_at?.toISOString() ?? null,
          changed: change.changed,
          revoked_refresh_tokens: change.revokedRefreshTokens,
        },
      }
    })

  const setAdminFlag = (isAdmin: boolean) =>
    defineRoute({
      method: 'post',
      path: `/api/v1/admin/users/{user}/${isAdmin ? 'grant-admin' : 'revoke-admin'}`,
      summary: isAdmin
        ? 'Make a user an admin (idempotent)'
        : "Take a user's admin flag away (idempotent); their active keys carrying admin are revoked in the same transaction",
      tags: TAGS,
      auth: ADMIN,
      request: { params: userParams },
      responses: {
        200: adminFlagChange,
        404: errorResponse('No such user'),
        409: errorResponse('revoke-admin only: an admin cannot revoke their own admin flag'),
      },
    }).handle(async ({ params, principal, log }) => {
      const change = await changeAdmin(db, params.user, isAdmin, now(), (user) => {
        if (!isAdmin && user.id === principal.userId) {
          throw new ConflictError('cannot revoke your own admin flag', 'another admin can (or the break-glass path on the database: `nodeplane user revoke-admin --direct-db`)')
        }
      }).catch(notFound(params.user))
      log.info({ targetUserId: change.user.id, isAdmin, changed: change.changed, revokedApiKeys: change.revokedAdminKeys.length }, isAdmin ? 'admin flag granted' : 'admin flag revoked')
      return { status: 200, body: { ...toUserView(change.user), changed: change.changed, revoked_api_keys: change.revokedAdminKeys } }
    })

  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/admin/users',
      summary: 'List every user, oldest first',
      tags: TAGS,
      auth: ADMIN,
      request: { query: paginationQuery },
      responses: { 200: pageSchema(userView).openapi('UserPage') },
    }).handle(async ({ query }) => {
      const page = await paginateKeyset(db, db('users'), { sortColumn: 'created_at', limit: query.limit, cursor: query.cursor, map: (row) => toUserView(userFromRow(row as Parameters<typeof userFromRow>[0])) })
      return { status: 200, body: page }
    }),
    defineRoute({
      method: 'post',
      path: '/api/v1/admin/users',
      summary: 'Create a user (by email); the first admin is made on the database instead (`nodeplane user create --direct-db`)',
      tags: TAGS,
      auth: ADMIN,
      request: { body: newUserBody },
      responses: { 201: userView, 409: errorResponse('A user with this email exists') },
    }).handle(async ({ body, log }) => {
      const user = await createUser(db, { email: body.email, is_admin: body.is_admin }, now())
      log.info({ targetUserId: user.id, isAdmin: user.is_admin }, 'user created by an admin')
      return { status: 201, body: toUserView(user) }
    }),
    setAdminFlag(true),
    setAdminFlag(false),
    setDisabled(true),
    setDisabled(false),
    defineRoute({
      method: 'post',
      path: '/api/v1/admin/api-keys/{id}/revoke',
      summary: "Revoke any user's API key: it stops working at once (again: harmless)",
      tags: TAGS,
      auth: ADMIN,
      request: { params: z.object({ id: z.string().uuid() }) },
      responses: { 200: revokedKeyView, 404: errorResponse('No such key') },
    }).handle(async ({ params, log }) => {
      const key = await revokeAnyApiKey(db, params.id, now())
      log.info({ apiKeyId: key.id, ownerUserId: key.user_id }, 'API key revoked by an admin')
      return {
        status: 200,
        body: { id: key.id, user_id: key.user_id, name: key.name, key_prefix: key.key_prefix, revoked_at: (key.revoked_at ?? now()).toISOString() },
      }
    }),
  ]
}
