/**
 * Access tokens of the legacy wallet path, and the key set that verifies them.
 *
 * The contract with the API server (src/auth/legacy-tokens.ts), not to be changed on one side:
 * RS256, header `kid` (the signing key's RFC 7638 thumbprint), claims `iss: "nodeplane-auth"`,
 * `aud: "nodeplane-api"`, `sub` = the local user id (UUID), `iat`, `exp` = iat + TTL
 * (AUTH_ACCESS_TOKEN_TTL, 15 minutes by default). The key set is published at
 * `GET /.well-known/jwks.json` on the auth server.
 */
import { SignJWT, type JWK } from 'jose'
import { LEGACY_TOKEN_AUDIENCE, LEGACY_TOKEN_ISSUER } from './legacy-tokens.js'
import { SIGNING_ALGORITHM, type SigningKey } from './signing-key.js'
export const JWKS_PATH = '/.well-known/jwks.json'

export interface IssuedAccessToken {
  token: string
  /** Seconds until it expires (`expires_in`). */
  expiresIn: number
  expiresAt: Date
}

export interface JsonWebKeySet {
  keys: JWK[]
}

export interface TokenIssuer {
  readonly kid: string
  issueAccessToken(userId: string, now: Date): Promise<IssuedAccessToken>
  jwks(): JsonWebKeySet
}

export function createTokenIssuer(options: { key: SigningKey; accessTokenTtlMs: number }): TokenIssuer {
  const { key } = options
  // JWT times are whole seconds; the lifetime is too, so exp - iat is exactly expires_in.
  const ttlSeconds = Math.max(1, Math.floor(options.accessTokenTtlMs / 1000))
  return {
    kid: key.kid,
    async issueAccessToken(userId, now) {
      const iat = Math.floor(now.getTime() / 1000)
      const exp = iat + ttlSeconds
      const token = await new SignJWT({})
        .setProtectedHeader({ alg: SIGNING_ALGORITHM, kid: key.kid, typ: 'JWT' })
        .setIssuer(LEGACY_TOKEN_ISSUER)
        .setAudience(LEGACY_TOKEN_AUDIENCE)
        .setSubject(userId)
        .setIssuedAt(iat)
        .setExpirationTime(exp)
        .sign(key.privateKey)
      return { token, expiresIn: ttlSeconds, expiresAt: new Date(exp * 1000) }
    },
    jwks() {
      return { keys: [{ ...key.publicJwk }] }
    },
  }
}
