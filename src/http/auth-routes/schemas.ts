/** Request and response shapes of the auth server's routes (docs/auth.md, "Auth server"). */
import type { TokenPair } from '../../auth/wallet-sign-in.js'
import { z } from '../zod.js'

export const tokenPairSchema = z
  .object({
    access_token: z.string().openapi({ description: 'RS256 JWT for the API server: Authorization: Bearer <access_token>' }),
    token_type: z.literal('Bearer'),
    expires_in: z.number().int().openapi({ description: 'Seconds the access token is valid (AUTH_ACCESS_TOKEN_TTL)', example: 900 }),
    refresh_token: z.string().openapi({ description: 'Opaque, `npr_` prefix; shown once; single use (POST /auth/refresh rotates it)' }),
    refresh_expires_at: z.string().datetime().openapi({ description: 'When the refresh token expires (AUTH_REFRESH_TOKEN_TTL after issue)' }),
  })
  .openapi('TokenPair')

export function tokenPairBody(tokens: TokenPair): z.input<typeof tokenPairSchema> {
  return { ...tokens, refresh_expires_at: tokens.refresh_expires_at.toISOString() }
}

export const refreshTokenRequest = z
  .object({ refresh_token: z.string().min(1).max(200).openapi({ description: 'A refresh token from /auth/verify or /auth/refresh' }) })
  .openapi('RefreshTokenRequest')
