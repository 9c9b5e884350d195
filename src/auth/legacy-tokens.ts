/**
 * Verification of the legacy wallet path's access tokens on the API server. The auth-server
 * (src/auth/token-issuer.ts) issues them; this is the contract between the two, and changing it
 * breaks every token in flight:
 *
 * - RS256 with a `kid` header; the auth-server publishes its key set at
 *   `/.well-known/jwks.json` (AUTH_LEGACY_JWKS_URL, default the local auth-server);
 * - claims `iss: "nodeplane-auth"`, `aud: "nodeplane-api"`, `sub` = the user's id (UUID), `iat`,
 *   `exp`.
 *
 * The API server tells these apart from identity-provider tokens by the (unverified) `iss`
 * before choosing the key set; the signature check that follows is what makes the claim true.
 */
import { UnauthorizedError } from '../errors.js'
import { isUuid } from '../db/ids.js'
import { remoteKeySet, verifyRs256, type KeySetOptions } from './idp-tokens.js'

export const LEGACY_TOKEN_ISSUER = 'nodeplane-auth'
export const LEGACY_TOKEN_AUDIENCE = 'nodeplane-api'
export const LEGACY_JWKS_PATH = '/.well-known/jwks.json'

/** Where the API server fetches the legacy key set when AUTH_LEGACY_JWKS_URL is not set. */
export function defaultLegacyJwksUrl(authServerPort: number): string {
  return `http://127.0.0.1:${authServerPort}${LEGACY_JWKS_PATH}`
}

export interface LegacyTokenSettings {
  /** AUTH_LEGACY_JWKS_URL, or defaultLegacyJwksUrl(AUTH_SERVER_PORT). */
  jwksUrl: string
  /** AUTH_CLOCK_SKEW in ms. */
  clockSkewMs: number
  keySet?: KeySetOptions
}

export interface LegacyIdentity {
  /** `sub`: the local user id. */
  userId: string
}

export interface LegacyTokenVerifier {
  verify(token: string, now: Date): Promise<LegacyIdentity>
}

const LEGACY_LABEL = 'wallet sign-in'

export function createLegacyTokenVerifier(settings: LegacyTokenSettings): LegacyTokenVerifier {
  const keySet = remoteKeySet(settings.jwksUrl, settings.keySet)
  return {
    async verify(token, now) {
      const claims = await verifyRs256(token, keySet, {
        label: LEGACY_LABEL,
        issuer: LEGACY_TOKEN_ISSUER,
        audience: LEGACY_TOKEN_AUDIENCE,
        clockSkewMs: settings.clockSkewMs,
        now,
        requiredClaims: ['iat'],
      })
      const sub = claims.sub as string
      if (!isUuid(sub)) throw new UnauthorizedError('invalid token', `${LEGACY_LABEL} token refused: sub is not a user id`)
      return { userId: sub.toLowerCase() }
    },
  }
}
