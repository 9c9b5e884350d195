/**
 * Legacy wallet sign-in (spec: Authentication, "Legacy wallet sign-in on the auth server"):
 * `GET /auth/nonce` issues a challenge for an address; `POST /auth/verify` checks the signed
 * message and answers an access token and a refresh token.
 *
 * Order of checks in verify: the input's shape (400), the nonce is usable for that address
 * (401), the signature (wallet.ts: 400 malformed, 401 not matching), then one transaction
 * consumes the nonce (atomically, so a replay racing this request loses), finds or creates the
 * user and stores the refresh token. A request failing after the nonce check leaves the nonce
 * unused, so a client whose wallet produced a bad signature can retry within its 5 minutes.
 */
import type { Db, Queryable } from '../db/knex.js'
import { isUniqueViolation } from '../db/errors.js'
import { uuidv7 } from '../db/ids.js'
import { UnauthorizedError } from '../errors.js'
import { consumeNonce, issueNonce, nonceFromMessage, whyNonceUnusable, type IssuedNonce } from './nonces.js'
import { createRefreshToken } from './refresh-tokens.js'
import type { TokenIssuer } from './token-issuer.js'
import { findUserByWalletAddress, userFromRow, type User } from './users.js'
import { normalizeWalletAddress, verifyWalletSignature, type VerifiedWallet } from './wallet.js'

export interface TokenPair {
  access_token: string
  token_type: 'Bearer'
  /** Seconds the access token is valid. */
  expires_in: number
  refresh_token: string
  refresh_expires_at: Date
}

export interface SignInDeps {
  db: Db
  issuer: TokenIssuer
  refreshTokenTtlMs: number
}

export async function requestNonce(db: Queryable, address: string, now: Date): Promise<IssuedNonce> {
  return issueNonce(db, normalizeWalletAddress(address), now)
}

export interface WalletSignIn {
  address: string
  message: string
  signature: string
}

export interface SignedIn {
  user: User
  created: boolean
  tokens: TokenPair
}

export async function signInWithWallet(deps: SignInDeps, input: WalletSignIn, now: Date): Promise<SignedIn> {
  const address = normalizeWalletAddress(input.address)
  const nonce = nonceFromMessage(input.message)
  const unusable = await whyNonceUnusable(deps.db, nonce, address, now)
  if (unusable !== undefined) throw new UnauthorizedError('invalid nonce', unusable)

  const wallet = verifyWalletSignature({ message: input.message, signature: input.signature, address })
  if (wallet.address !== address) {
    throw new UnauthorizedError('wallet signature does not match the address', 'the signature was not made by the address given')
  }

  const { user, created, refresh } = await deps.db.transaction(async (trx) => {
    if (!(await consumeNonce(trx, nonce, address, now))) {
      // Another request used it between the check above and here.
      throw new UnauthorizedError('invalid nonce', (await whyNonceUnusable(trx, nonce, address, now)) ?? 'the nonce was already used; request a new one')
    }
    const found = await findOrCreateWalletUser(trx, wallet, now)
    if (found.user.disabled_at) throw new UnauthorizedError('user disabled', 'this user has been disabled by an operator')
    return { ...found, refresh: await createRefreshToken(trx, found.user.id, deps.refreshTokenTtlMs, now) }
  })
  const access = await deps.issuer.issueAccessToken(user.id, now)
  return {
    user,
    created,
    tokens: {
      access_token: access.token,
      token_type: 'Bearer',
      expires_in: access.expiresIn,
      refresh_token: refresh.token,
      refresh_expires_at: refresh.record.expires_at,
    },
  }
}

/**
 * The user owning the wallet (case-insensitive lookup), or a new one with the wallet's
 * address (EIP-55 / base58), type and public key and no email. A user created concurrently for
 * the same address (the unique index on the wallet address) is found instead.
 */
export async function findOrCreateWalletUser(db: Queryable, wallet: VerifiedWallet, now: Date): Promise<{ user: User; created: boolean }> {
  const existing = await findUserByWalletAddress(db, wallet.address)
  if (existing) return { user: existing, created: false }
  const row = {
    id: uuidv7(now.getTime()),
    email: null,
    wallet_address: wallet.address,
    wallet_type: wallet.walletType,
    wallet_public_key: Buffer.from(wallet.publicKey),
    external_auth_id: null,
    is_admin: false,
    created_at: now,
    updated_at: now,
  }
  try {
    // ON CONFLICT DO NOTHING: a unique violation would abort a Postgres transaction.
    const inserted = (await db('users').insert(row).onConflict().ignore().returning('id')) as unknown[]
    if (inserted.length === 1) return { user: userFromRow(row), created: true }
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
  }
  const raced = await findUserByWalletAddress(db, wallet.address)
  if (!raced) throw new Error(`could not create or find the user of wallet ${wallet.address}`)
  return { user: raced, created: false }
}
