/**
 * Operator actions on other users (scope `admin`; docs/auth.md, "Disabled users"):
 *
 * - `POST /api/v1/admin/users/{user}/disable` and `/enable`: a disabled user's every API key and
 *   token is refused from the next request on; disabling also revokes their refresh tokens.
 * - `POST /api/v1/admin/api-keys/{id}/revoke`: revoke any user's key.
 *
 * `{user}` is a user id or an email, as the operator commands take it.
 */
import { revokeAnyApiKey } from '../../auth/api-keys.js'
import { resolveUser, setUserDisabled } from '../../auth/users.js'
import type { Db } from '../../db/knex.js'
import { ConflictError, NotFoundError } from '../../errors.js'
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
        const user = await resolveUser(trx, params.user).catch((err: unknown) => {
          throw err instanceof NotFoundError ? new NotFoundError('not found', `no user ${params.user.slice(0, 80)}`) : err
        })
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

  return [
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
