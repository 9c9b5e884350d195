/** `GET /api/v1/me`: who the caller is and what it may do (what `nodeplane whoami` shows). */
import { findUserById } from '../../auth/users.js'
import type { Db } from '../../db/knex.js'
import { UnauthorizedError } from '../../errors.js'
import { defineRoute, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface MeRouteDeps {
  db: Db
}

const meBody = z
  .object({
    user_id: z.string().uuid(),
    email: z.string().nullable(),
    is_admin: z.boolean(),
    scopes: z.array(z.string()).openapi({ description: 'The scopes this credential grants now' }),
    auth_method: z.enum(['api_key', 'jwt']),
    api_key_id: z.string().uuid().optional().openapi({ description: 'The key used, when auth_method is api_key' }),
    wallet_address: z.string().nullable(),
    wallet_type: z.enum(['ethereum', 'solana']).nullable(),
  })
  .openapi('Me')

export function meRoutes(deps: MeRouteDeps): ApiRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/me',
      summary: 'The authenticated caller: user, scopes and how it authenticated',
      tags: ['auth'],
      auth: 'authenticated',
      responses: { 200: meBody },
    }).handle(async ({ principal }) => {
      const user = principal.user ?? (await findUserById(deps.db, principal.userId))
      // Deleted between authentication and now: the credential no longer names anyone.
      if (!user) throw new UnauthorizedError('unknown user', 'the user behind this credential no longer exists')
      return {
        status: 200,
        body: {
          user_id: user.id,
          email: user.email,
          is_admin: user.is_admin,
          scopes: [...principal.scopes],
          auth_method: principal.method === 'api_key' ? 'api_key' : 'jwt',
          ...(principal.apiKeyId ? { api_key_id: principal.apiKeyId } : {}),
          wallet_address: user.wallet_address,
          wallet_type: user.wallet_type,
        },
      }
    }),
  ]
}
