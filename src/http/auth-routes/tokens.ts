/** `POST /auth/refresh` (rotation, with the reuse defence) and `POST /auth/logout`. */
import { rotateRefreshToken, refreshTokenRefusal, revokeRefreshToken } from '../../auth/refresh-tokens.js'
import type { TokenIssuer } from '../../auth/token-issuer.js'
import type { Db } from '../../db/knex.js'
import { errorResponse, defineRoute, type ApiRoute } from '../route.js'
import { refreshTokenRequest, tokenPairBody, tokenPairSchema } from './schemas.js'

export function refreshRoute(deps: { db: Db; issuer: TokenIssuer; refreshTokenTtlMs: number; now: () => Date }): ApiRoute {
  return defineRoute({
    method: 'post',
    path: '/auth/refresh',
    summary: 'A new access token and a new refresh token for a refresh token (which dies)',
    description:
      'Rotation: the presented token is revoked and a new one issued in one transaction. Presenting a token that was ' +
      'already rotated revokes every token issued after it in the same sign-in (it was copied), and answers 401.',
    tags: ['auth'],
    auth: 'none',
    request: { body: refreshTokenRequest },
    responses: {
      200: tokenPairSchema,
      401: errorResponse('Unknown, expired, revoked or already used refresh token'),
      429: errorResponse('Rate limit exceeded; see Retry-After'),
    },
  }).handle(async ({ body, log }) => {
    const now = deps.now()
    const outcome = await rotateRefreshToken(deps.db, body.refresh_token, deps.refreshTokenTtlMs, now)
    if (!outcome.ok) {
      if (outcome.reason === 'reused') {
        log.warn({ revokedTokens: outcome.revokedDescendants }, 'refresh token reused: every later token of its sign-in revoked')
      }
      throw refreshTokenRefusal(outcome.reason)
    }
    const { rotated } = outcome
    const access = await deps.issuer.issueAccessToken(rotated.userId, now)
    log.info({ userId: rotated.userId }, 'refresh token rotated')
    return {
      status: 200,
      body: tokenPairBody({
        access_token: access.token,
        token_type: 'Bearer',
        expires_in: access.expiresIn,
        refresh_token: rotated.token,
        refresh_expires_at: rotated.record.expires_at,
      }),
      headers: { 'Cache-Control': 'no-store' },
    }
  })
}

export function logoutRoute(deps: { db: Db; now: () => Date }): ApiRoute {
  return defineRoute({
    method: 'post',
    path: '/auth/logout',
    summary: 'Revoke a refresh token (and any issued after it in the same sign-in)',
    description: 'Always 204 for a well-formed request, whether or not the token was known or still active: logout is idempotent and says nothing about the token.',
    tags: ['auth'],
    auth: 'none',
    request: { body: refreshTokenRequest },
    responses: { 204: { description: 'Revoked, or nothing to revoke' }, 429: errorResponse('Rate limit exceeded; see Retry-After') },
  }).handle(async ({ body, log }) => {
    const revoked = await revokeRefreshToken(deps.db, body.refresh_token, deps.now())
    if (revoked > 0) log.info({ revokedTokens: revoked }, 'logged out')
    return { status: 204 }
  })
}
