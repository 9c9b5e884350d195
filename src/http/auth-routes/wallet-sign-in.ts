/**
 * Legacy wallet sign-in: `GET /auth/nonce` and `POST /auth/verify` (spec: Authentication).
 * Mounted in modes `both` and `siwe` only.
 */
import type { Db } from '../../db/knex.js'
import { MAX_WALLET_MESSAGE_LENGTH } from '../../auth/wallet.js'
import type { SignInBinding } from '../../auth/sign-in-message.js'
import { requestNonce, signInWithWallet } from '../../auth/wallet-sign-in.js'
import type { TokenIssuer } from '../../auth/token-issuer.js'
import { errorResponse, defineRoute, type ApiRoute } from '../route.js'
import { z } from '../zod.js'
import { tokenPairBody, tokenPairSchema } from './schemas.js'

export interface WalletSignInRouteDeps {
  db: Db
  issuer: TokenIssuer
  refreshTokenTtlMs: number
  now: () => Date
  /** AUTH_SIWE_*: what sign-in messages must be bound to. */
  binding?: SignInBinding
}

const address = z.string().min(1).max(100).openapi({ description: 'Ethereum (0x…, any case) or Solana (base58) address', example: '0x52908400098527886E0F7030069857D2E4169EE7' })

const nonceBody = z
  .object({
    nonce: z.string().openapi({ description: '64 random letters and digits; single use' }),
    address: z.string().openapi({ description: 'The address, normalised: EIP-55 for Ethereum, base58 as given for Solana' }),
    expires_at: z.string().datetime().openapi({ description: 'Five minutes after issue' }),
    message: z.string().openapi({ description: 'The exact text to sign: a Sign-In with Ethereum (EIP-4361) message, or the same fields for Solana, bound to this service\'s domain, URI and chain' }),
  })
  .openapi('AuthNonce')

const verifyRequest = z
  .object({
    address,
    message: z.string().min(1).max(MAX_WALLET_MESSAGE_LENGTH).openapi({ description: 'The message GET /auth/nonce returned, signed unchanged' }),
    signature: z.string().min(1).max(200).openapi({ description: 'Ethereum: 0x + 130 hex digits; Solana: base58 of the 64-byte Ed25519 signature' }),
  })
  .openapi('WalletVerifyRequest')

export function walletSignInRoutes(deps: WalletSignInRouteDeps): ApiRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: '/auth/nonce',
      summary: 'Wallet sign-in, step 1: a single-use challenge for the address',
      tags: ['auth'],
      auth: 'none',
      request: { query: z.object({ address }) },
      responses: { 200: nonceBody, 429: errorResponse('Rate limit exceeded; see Retry-After') },
    }).handle(async ({ query }) => {
      const issued = await requestNonce(deps.db, query.address, deps.now(), deps.binding)
      return {
        status: 200,
        body: { nonce: issued.nonce, address: issued.address, expires_at: issued.expires_at.toISOString(), message: issued.message },
        headers: { 'Cache-Control': 'no-store' },
      }
    }),
    defineRoute({
      method: 'post',
      path: '/auth/verify',
      summary: 'Wallet sign-in, step 2: the signed challenge in exchange for an access token and a refresh token',
      description:
        'The message is the EIP-4361 (Solana: same fields) message GET /auth/nonce returned: its domain, URI, chain id, nonce, ' +
        'Issued At and Expiration Time must be the ones issued. The user owning the wallet is found (case-insensitively) or created. ' +
        '401: another domain, URI or chain; nonce unknown, used, expired or issued for another address; signature not made by ' +
        'the address. 400: malformed address, message or signature.',
      tags: ['auth'],
      auth: 'none',
      request: { body: verifyRequest },
      responses: {
        200: tokenPairSchema,
        401: errorResponse('Invalid nonce, or the signature was not made by the address'),
        429: errorResponse('Rate limit exceeded; see Retry-After'),
      },
    }).handle(async ({ body, log }) => {
      const signedIn = await signInWithWallet({ db: deps.db, issuer: deps.issuer, refreshTokenTtlMs: deps.refreshTokenTtlMs, ...(deps.binding ? { binding: deps.binding } : {}) }, body, deps.now())
      log.info({ userId: signedIn.user.id, walletType: signedIn.user.wallet_type, userCreated: signedIn.created }, 'wallet sign-in')
      return { status: 200, body: tokenPairBody(signedIn.tokens), headers: { 'Cache-Control': 'no-store' } }
    }),
  ]
}
