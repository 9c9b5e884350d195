/**
 * `GET /api/v1/crypto/public-key` (spec: "server X25519 public key", no authentication): the key
 * clients seal secret inputs to, in the layout docs/secrets.md describes. The key id changes on
 * rotation; boxes sealed to an earlier key still open, so a cached key stays usable.
 */
import type { Db } from '../../db/knex.js'
import { UnavailableError } from '../../errors.js'
import { activeServerPublicKey, SERVER_KEY_ALGORITHM } from '../../secrets/server-key.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface CryptoRouteDeps {
  db: Db
}

/** Clients may cache the key this long; a rotation never breaks a cached key (see above). */
const CACHE_SECONDS = 300

const publicKeyBody = z
  .object({
    key_id: z.string().openapi({ description: 'Identifies this key pair across rotations: first 16 hex digits of SHA-256 of the public key', example: '3f1c9a0d2b7e4c55' }),
    public_key: z.string().openapi({ description: 'base64 of the 32-byte X25519 public key', example: 'hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=' }),
    algorithm: z.literal(SERVER_KEY_ALGORITHM).openapi({
      description: 'Seal with NaCl box from a fresh ephemeral key pair; send ephemeral public key (32) || nonce (24) || ciphertext',
    }),
  })
  .openapi('ServerPublicKey')

export function cryptoRoutes(deps: CryptoRouteDeps): ApiRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/crypto/public-key',
      summary: 'The server X25519 public key that secret inputs are sealed to',
      tags: ['crypto'],
      auth: 'none',
      responses: {
        200: publicKeyBody,
        503: errorResponse('Secrets are not initialised on this server yet'),
      },
    }).handle(async () => {
      const key = await activeServerPublicKey(deps.db)
      if (!key) throw new UnavailableError('secrets are not initialised', 'the server has no X25519 key pair yet; an operator runs `nodeplane secrets init`')
      return { status: 200, body: key, headers: { 'Cache-Control': `public, max-age=${CACHE_SECONDS}` } }
    }),
  ]
}
