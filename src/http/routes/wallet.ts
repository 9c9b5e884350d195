/**
 * `POST /api/v1/wallet/register-public-key` (spec: Authentication, "Wallet registration"): links
 * a wallet to the authenticated user. The signed message must contain the caller's user id (so
 * a signature made for one account cannot be replayed for another) and name the wallet address;
 * the wallet type follows from the address format (src/auth/wallet.ts).
 *
 * Answers: 200 `{status: "ok", address}`; 400 malformed message or signature, or a message
 * without the caller's user id; 401 a well-formed signature that the named wallet did not make;
 * 409 the address belongs to another user. Registering again replaces the caller's wallet;
 * registering the same wallet again is harmless.
 */
import { findUserByWalletAddress } from '../../auth/users.js'
import { MAX_WALLET_MESSAGE_LENGTH, verifyWalletSignature, type VerifiedWallet } from '../../auth/wallet.js'
import type { Db } from '../../db/knex.js'
import { isUniqueViolation } from '../../db/errors.js'
import { ConflictError, UnauthorizedError, ValidationError } from '../../errors.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface WalletRouteDeps {
  db: Db
  now?: () => Date
}

const registerBody = z
  .object({
    message: z
      .string()
      .min(1, 'must not be empty')
      .max(MAX_WALLET_MESSAGE_LENGTH)
      .openapi({
        description: "The signed text. Must contain the caller's user id and the wallet address.",
        example: 'Link wallet 0x52908400098527886E0F7030069857D2E4169EE7 to nodeplane user 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
      }),
    signature: z
      .string()
      .min(1, 'must not be empty')
      .max(256)
      .openapi({ description: 'Ethereum: 0x + 130 hex (EIP-191 personal_sign). Solana: base58 of the 64-byte Ed25519 signature.' }),
  })
  .openapi('WalletRegistration')

const registeredBody = z.object({ status: z.literal('ok'), address: z.string() }).openapi('WalletRegistered')

export function walletRoutes(deps: WalletRouteDeps): ApiRoute[] {
  const now = deps.now ?? (() => new Date())
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/wallet/register-public-key',
      summary: 'Link a wallet to the caller by a signed message',
      tags: ['auth'],
      auth: 'authenticated',
      request: { body: registerBody },
      responses: {
        200: registeredBody,
        401: errorResponse('Missing or invalid authentication, or the signature was not made by the wallet the message names'),
        409: errorResponse('The wallet address is registered to another user'),
      },
    }).handle(async ({ body, principal, log }) => {
      if (!body.message.toLowerCase().includes(principal.userId.toLowerCase())) {
        throw new ValidationError('invalid request', `body.message: must contain your user id ${principal.userId}`)
      }
      const wallet = verifyOrExplain(body.message, body.signature)
      await deps.db.transaction(async (trx) => {
        const owner = await findUserByWalletAddress(trx, wallet.address)
        if (owner && owner.id !== principal.userId) throw taken(wallet.address)
        try {
          const updated = await trx('users').where({ id: principal.userId }).update({
            wallet_address: wallet.address,
            wallet_type: wallet.walletType,
            wallet_public_key: Buffer.from(wallet.publicKey),
            updated_at: now(),
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

/** The 400s of the verifier name the field as the rest of the API does (`body.signature: ...`). */
function verifyOrExplain(message: string, signature: string): VerifiedWallet {
  try {
    return verifyWalletSignature({ message, signature })
  } catch (err) {
    if (err instanceof ValidationError) throw new ValidationError('invalid request', `body.${err.details}`)
    throw err
  }
}

function taken(address: string): ConflictError {
  return new ConflictError('wallet already registered', `${address} is registered to another user`)
}
