/**
 * Wallet registration (spec: Authentication, "Wallet registration"; docs/auth.md):
 * `POST /api/v1/wallet/nonce` issues the message to sign (EIP-4361 / the Solana equivalent,
 * bound to this service, with a single-use 5-minute nonce for this user and address, naming the
 * user id); `POST /api/v1/wallet/register-public-key` links the wallet that signed it.
 *
 * Answers: 200 `{status: "ok", address}`; 400 malformed message or signature, or a message
 * without the caller's user id; 401 another domain/URI/chain, an unusable nonce, a signature the
 * named wallet did not make; 409 the address belongs to another user. Registering again
 * replaces the caller's wallet.
 */
import { findUserByWalletAddress } from '../../auth/users.js'
import { DEFAULT_SIGN_IN_BINDING, type SignInBinding } from '../../auth/sign-in-message.js'
import { MAX_WALLET_MESSAGE_LENGTH } from '../../auth/wallet.js'
import { checkRegistration, consumeRegistrationNonce, issueRegistrationNonce } from '../../auth/wallet-registration.js'
import type { Db } from '../../db/knex.js'
import { isUniqueViolation } from '../../db/errors.js'
import { ConflictError, UnauthorizedError, ValidationError } from '../../errors.js'
import { defineRoute, errorResponse, NO_STORE, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface WalletRouteDeps {
  db: Db
  now?: () => Date
  /** AUTH_SIWE_*: the domain, URI and chain registration messages are bound to. */
  signInBinding?: SignInBinding
}

const registerBody = z
  .object({
    message: z
      .string()
      .min(1, 'must not be empty')
      .max(MAX_WALLET_MESSAGE_LENGTH)
      .openapi({ description: 'The message POST /api/v1/wallet/nonce returned, signed unchanged (it names your user id and the wallet)' }),
    signature: z
      .string()
      .min(1, 'must not be empty')
      .max(256)
      .openapi({ description: 'Ethereum: 0x + 130 hex (EIP-191 personal_sign). Solana: base58 of the 64-byte Ed25519 signature.' }),
  })
  .openapi('WalletRegistration')

const nonceRequest = z
  .object({ address: z.string().min(1).max(100).openapi({ description: 'Ethereum (0x…) or Solana (base58) address to register' }) })
  .openapi('WalletNonceRequest')

const nonceAnswer = z
  .object({
    nonce: z.string(),
    address: z.string().openapi({ description: 'Normalised: EIP-55 for Ethereum' }),
    expires_at: z.string().datetime(),
    message: z.string().openapi({ description: 'The exact text to sign: EIP-4361 (Solana: same fields), naming your user id' }),
  })
  .openapi('WalletNonce')

const registeredBody = z.object({ status: z.literal('ok'), address: z.string() }).openapi('WalletRegistered')

export function walletRoutes(deps: WalletRouteDeps): ApiRoute[] {
  const now = deps.now ?? (() => new Date())
  const binding = deps.signInBinding ?? DEFAULT_SIGN_IN_BINDING
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/wallet/nonce',
      summary: 'A single-use, 5-minute registration challenge for a wallet address: the message to sign',
      tags: ['auth'],
      auth: 'authenticated',
      request: { body: nonceRequest },
      responses: { 200: nonceAnswer },
    }).handle(async ({ body, principal }) => {
      const issued = await issueRegistrationNonce(deps.db, principal.userId, body.address, now(), binding).catch((err: unknown) => {
        throw err instanceof ValidationError ? new ValidationError('invalid request', `body.address: ${err.details ?? err.message}`) : err
      })
      return {
        status: 200,
        body: { nonce: issued.nonce, address: issued.address, expires_at: issued.expires_at.toISOString(), message: issued.message },
        headers: NO_STORE,
      }
    }),
    defineRoute({
      method: 'post',
      path: '/api/v1/wallet/register-public-key',
      summary: 'Link a wallet to the caller by the signed registration message',
      tags: ['auth'],
      auth: 'authenticated',
      request: { body: registerBody },
      responses: {
        200: registeredBody,
        401: errorResponse('Missing or invalid authentication; a message bound to another domain, URI or chain; a nonce not usable by this user for this address; or a signature not made by the wallet'),
        409: errorResponse('The wallet address is registered to another user'),
      },
    }).handle(async ({ body, principal, log }) => {
      const at = now()
      const { wallet, nonce } = await checkRegistration(deps.db, { userId: principal.userId, message: body.message, signature: body.signature }, at, binding)
      await deps.db.transaction(async (trx) => {
        if (!(await consumeRegistrationNonce(trx, nonce, principal.userId, at))) {
          throw new UnauthorizedError('invalid nonce', 'the nonce was already used; request a new one')
        }
        const owner = await findUserByWalletAddress(trx, wallet.address)
        if (owner && owner.id !== principal.userId) throw taken(wallet.address)
        try {
          const updated = await trx('users').where({ id: principal.userId }).update({
            wallet_address: wallet.address,
            wallet_type: wallet.walletType,
            wallet_public_key: Buffer.from(wallet.publicKey),
            updated_at: at,
          })
          if (updated !== 1) throw new UnauthorizedError('unknown user', 'the user behind this credential no longer exists')
        } catch (err) {
          // Two users racing for one address: the unique index decides.
          if (isUniqueViolation(err)) throw taken(wallet.address)
          throw err
        }
      })
      log.info({ walletType: wallet.walletType, address: wallet.address }, 'wallet registered')
      return { status: 200, body: { status: 'ok', address: wallet.address } }
    }),
  ]
}

function taken(address: string): ConflictError {
  return new ConflictError('wallet already registered', `${address} is registered to another user`)
}
