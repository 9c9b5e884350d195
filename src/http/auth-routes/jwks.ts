/** `GET /.well-known/jwks.json`: the public key set that verifies the access tokens issued here. */
import { JWKS_PATH, type TokenIssuer } from '../../auth/token-issuer.js'
import { defineRoute, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

const jwkSchema = z
  .object({ kty: z.literal('RSA'), n: z.string(), e: z.string(), kid: z.string(), alg: z.literal('RS256'), use: z.literal('sig') })
  .openapi('Jwk')
const jwksSchema = z.object({ keys: z.array(jwkSchema) }).openapi('JsonWebKeySet')

export function jwksRoute(deps: { issuer: TokenIssuer }): ApiRoute {
  return defineRoute({
    method: 'get',
    path: JWKS_PATH,
    summary: 'Public keys verifying the access tokens of the wallet sign-in (RFC 7517 key set)',
    tags: ['auth'],
    auth: 'none',
    responses: { 200: jwksSchema },
  }).handle(async () => ({
    status: 200,
    body: deps.issuer.jwks() as z.input<typeof jwksSchema>,
    // Verifiers cache it; a new key (a new file) is picked up by them on an unknown kid anyway.
    headers: { 'Cache-Control': 'public, max-age=300' },
  }))
}
