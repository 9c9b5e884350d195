/**
 * Verification of identity-provider JWTs (spec: Authentication), and the RS256 rules both token
 * issuers share (the legacy wallet path in ./legacy-tokens.ts uses them too).
 *
 * - Only RS256. The allowed algorithm is fixed here, never taken from the token, so `none`,
 *   HS256 signed with the public key as the secret (HS/RS confusion) and any other algorithm are
 *   refused before a key is even looked up.
 * - `exp` is required; `exp` and `nbf` are enforced with AUTH_CLOCK_SKEW of tolerance against an
 *   injected clock.
 * - Keys come from the issuer's JWKS URL through jose's remote key set: fetched on first use,
 *   cached (10 minutes), and refetched when a token names a `kid` the cached set lacks (at most
 *   once per cooldown, 30 s by default, so a stream of bogus kids cannot hammer the provider).
 * - The token's `azp` must be one of AUTH_IDP_AUTHORIZED_PARTY (with the list empty, no token
 *   passes), and `iss` must equal AUTH_IDP_ISSUER when that is set.
 */
import {
  createRemoteJWKSet,
  errors as joseErrors,
  jwtVerify,
  type JWTHeaderParameters,
  type JWTPayload,
  type FlattenedJWSInput,
  type JWTVerifyGetKey,
} from 'jose'
import { UnauthorizedError, UnavailableError } from '../errors.js'

/** The one algorithm accepted from either issuer. */
export const TOKEN_ALGORITHM = 'RS256'

/** How the remote key set is cached and refreshed; jose's defaults unless given. */
export interface KeySetOptions {
  /** Minimum time between two refetches triggered by an unknown `kid` (default 30 s). */
  cooldownMs?: number
  /** A cached set older than this is refetched before use (default 10 minutes). */
  cacheMaxAgeMs?: number
  /** Deadline for one fetch of the set (default 5 s). */
  timeoutMs?: number
}

export const DEFAULT_KEY_SET_COOLDOWN_MS = 30_000
export const DEFAULT_KEY_SET_MAX_AGE_MS = 600_000
export const DEFAULT_KEY_SET_TIMEOUT_MS = 5_000

export interface RemoteKeySet {
  readonly url: string
  readonly getKey: JWTVerifyGetKey
  /** Refetches the set now (jose shares one fetch among concurrent callers). */
  reload(): Promise<void>
}

/**
 * A cached remote key set. Failures to fetch the set surface as UnavailableError (503): the
 * caller's token may be fine, we just cannot check it right now.
 */
export function remoteKeySet(url: string, options: KeySetOptions = {}): RemoteKeySet {
  const remote = createRemoteJWKSet(new URL(url), {
    cooldownDuration: options.cooldownMs ?? DEFAULT_KEY_SET_COOLDOWN_MS,
    cacheMaxAge: options.cacheMaxAgeMs ?? DEFAULT_KEY_SET_MAX_AGE_MS,
    timeoutDuration: options.timeoutMs ?? DEFAULT_KEY_SET_TIMEOUT_MS,
  })
  const getKey = async (header: JWTHeaderParameters, token: FlattenedJWSInput) => {
    try {
      return await remote(header, token)
    } catch (err) {
      if (err instanceof joseErrors.JWKSNoMatchingKey || err instanceof joseErrors.JWKSMultipleMatchingKeys) throw err
      throw new KeySetUnavailable(url, err)
    }
  }
  return { url, getKey, reload: () => remote.reload() }
}

/** The key set could not be fetched or parsed. */
class KeySetUnavailable extends Error {
  constructor(
    readonly url: string,
    cause: unknown,
  ) {
    super(`key set ${url} unavailable`, { cause })
  }
}

export interface Rs256Rules {
  /** Who the token is from, in words, for error details ("identity-provider", "wallet sign-in"). */
  label: string
  issuer?: string
  audience?: string
  clockSkewMs: number
  now: Date
  requiredClaims?: string[]
}

/** Verifies signature, algorithm and time claims; every failure is a 401 saying which check. */
export async function verifyRs256(token: string, keySet: RemoteKeySet, rules: Rs256Rules): Promise<JWTPayload> {
  try {
    const { payload } = await jwtVerify(token, keySet.getKey, {
      algorithms: [TOKEN_ALGORITHM],
      ...(rules.issuer !== undefined ? { issuer: rules.issuer } : {}),
      ...(rules.audience !== undefined ? { audience: rules.audience } : {}),
      clockTolerance: rules.clockSkewMs / 1000,
      currentDate: rules.now,
      requiredClaims: ['exp', 'sub', ...(rules.requiredClaims ?? [])],
    })
    return payload
  } catch (err) {
    throw tokenFailure(err, rules.label)
  }
}

/** Maps a jose (or key set) failure to the answer the caller gets; never quotes the token. */
export function tokenFailure(err: unknown, label: string): Error {
  const refused = (reason: string) => new UnauthorizedError('invalid token', `${label} token refused: ${reason}`)
  if (err instanceof KeySetUnavailable) {
    return new UnavailableError('token keys unavailable', `the ${label} key set could not be fetched; try again shortly`)
  }
  if (err instanceof joseErrors.JWTExpired) return refused('expired')
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    if (err.claim === 'nbf') return refused('not yet valid (nbf)')
    return refused(`claim "${err.claim}" ${err.reason === 'missing' ? 'is missing' : 'is not accepted'}`)
  }
  if (err instanceof joseErrors.JOSEAlgNotAllowed || err instanceof joseErrors.JOSENotSupported) {
    return refused(`only ${TOKEN_ALGORITHM} is accepted`)
  }
  if (err instanceof joseErrors.JWKSNoMatchingKey) return refused('no key in the key set matches the token (kid)')
  if (err instanceof joseErrors.JWKSMultipleMatchingKeys) return refused('the token names no kid and the key set has several keys')
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return refused('bad signature')
  // JWTInvalid, JWSInvalid and anything else jose rejects while parsing.
  return refused('malformed token')
}

export interface IdpTokenSettings {
  /** AUTH_IDP_JWKS_URL; without it, identity-provider tokens are refused. */
  jwksUrl?: string | undefined
  /** AUTH_IDP_ISSUER; `iss` must equal it when set. */
  issuer?: string | undefined
  /** AUTH_IDP_AUTHORIZED_PARTY; `azp` must be one of these. */
  authorizedParties: readonly string[]
  /** AUTH_CLOCK_SKEW in ms. */
  clockSkewMs: number
  keySet?: KeySetOptions
}

export interface IdpIdentity {
  /** `sub`: the provider's user id, matched against users.external_auth_id. */
  subject: string
  claims: JWTPayload
}

export interface IdpTokenVerifier {
  /** False when no JWKS URL is configured: every identity-provider token is refused. */
  readonly configured: boolean
  verify(token: string, now: Date): Promise<IdpIdentity>
}

const IDP_LABEL = 'identity-provider'

export function createIdpTokenVerifier(settings: IdpTokenSettings): IdpTokenVerifier {
  const keySet = settings.jwksUrl ? remoteKeySet(settings.jwksUrl, settings.keySet) : undefined
  const parties = new Set(settings.authorizedParties.map(normaliseOrigin))
  return {
    configured: keySet !== undefined,
    async verify(token, now) {
      if (!keySet) {
        throw new UnauthorizedError('invalid token', 'identity-provider tokens are not accepted: AUTH_IDP_JWKS_URL is not set on this server')
      }
      const claims = await verifyRs256(token, keySet, { label: IDP_LABEL, issuer: settings.issuer, clockSkewMs: settings.clockSkewMs, now })
      const azp = claims.azp
      if (typeof azp !== 'string' || !parties.has(normaliseOrigin(azp))) {
        const shown = typeof azp === 'string' ? `"${azp.slice(0, 100)}"` : 'missing'
        throw new UnauthorizedError('invalid token', `${IDP_LABEL} token refused: azp ${shown} is not one of AUTH_IDP_AUTHORIZED_PARTY`)
      }
      return { subject: claims.sub as string, claims }
    },
  }
}

/** `https://app.example.com/` and `https://app.example.com` name the same origin. */
function normaliseOrigin(origin: string): string {
  return origin.trim().replace(/\/+$/, '')
}
