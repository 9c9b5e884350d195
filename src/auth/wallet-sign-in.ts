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
import { UnauthorizedError, ValidationError } from '../errors.js'
import { consumeNonce, findNonce, issueNonce, whyNonceUnusable, type IssuedNonce, type NonceRecord } from './nonces.js'
import { bindingMismatch, DEFAULT_SIGN_IN_BINDING, parseSignInMessage, type SignInBinding } from './sign-in-message.js'
import { createRefreshToken } from './refresh-tokens.js'
import type { TokenIssuer } from './token-issuer.js'
import { findUserByWalletAddress, userFromRow, type User } from './users.js'
import { detectWalletType, normalizeWalletAddress, verifyWalletSignature, type VerifiedWallet } from './wallet.js'

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
  /** The domain, URI and chain sign-in messages must name (AUTH_SIWE_*). */
  binding?: SignInBinding
}

export async function requestNonce(db: Queryable, address: string, now: Date, binding: SignInBinding = DEFAULT_SIGN_IN_BINDING): Promise<IssuedNonce> {
  return issueNonce(db, normalizeWalletAddress(address), now, binding)
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
  const walletType = detectWalletType(address) ?? 'ethereum'
  const binding = deps.binding ?? DEFAULT_SIGN_IN_BINDING
  const fields = parseSignInMessage(walletType, input.message)
  if (normalizeWalletAddress(fields.address) !== address) {
    throw new ValidationError('invalid sign-in message', 'body.message: the message names another address than body.address')
  }
  const mismatch = bindingMismatch(binding, walletType, fields)
  if (mismatch !== undefined) throw new UnauthorizedError('sign-in message not for this service', mismatch)
  const nonce = fields.nonce
  const unusable = await whyNonceUnusable(deps.db, nonce, address, now)
  if (unusable !== undefined) throw new UnauthorizedError('invalid nonce', unusable)
  // Issued At and Expiration Time are the ones the server put in the message it issued: a
  // message stretching its own lifetime, or dated otherwise, is not the challenge.
  const issued = (await findNonce(deps.db, nonce)) as NonceRecord
  if (fields.issuedAt !== issued.created_at.toISOString() || fields.expirationTime !== issued.expires_at.toISOString()) {
    throw new UnauthorizedError('invalid nonce', 'the message\'s Issued At / Expiration Time are not the ones issued with the nonce; sign the message GET /auth/nonce returned')
  }

  const wallet = verifyWalletSignature({ message: input.message, signature: input.signature, address })
  if (wallet.address !== address) {
    throw new UnauthorizedError('wallet signature does not match the address', 'the signature was not made by the address given')
  }
  if (fields.siwe) {
    // The EIP-4361 library's own check too: signature, domain, nonce and time window.
    const verified = await fields.siwe.verify({ signature: input.signature, domain: binding.domain, nonce, time: now.toISOString() }, { suppressExceptions: true })
    if (!verified.success) throw new UnauthorizedError('wallet signature does not match the address', `the sign-in message does not verify: ${String(verified.error?.type ?? 'invalid')}`)
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
