/**
 * Wallet registration challenges (docs/auth.md, "Wallet registration"): like sign-in, the
 * message to sign is issued by the server, bound to this service's domain, URI and chain, carries
 * a single-use nonce with a 5-minute expiry, and names the caller's user id (spec: "the message
 * must contain the caller's user UUID"). The nonce is issued to one user for one address.
 */
import type { Queryable } from '../db/knex.js'
import { UnauthorizedError, ValidationError } from '../errors.js'
import { findNonce, generateNonce, NONCE_TTL_MS, type IssuedNonce } from './nonces.js'
import { bindingMismatch, buildSignInMessage, parseSignInMessage, type SignInBinding } from './sign-in-message.js'
import { detectWalletType, normalizeWalletAddress, verifyWalletSignature, type VerifiedWallet } from './wallet.js'

export const REGISTRATION_PURPOSE = 'wallet_registration'

export function registrationStatement(userId: string): string {
  return `Register this wallet with nodeplane user ${userId}. Signing costs nothing and sends no transaction.`
}

export async function issueRegistrationNonce(db: Queryable, userId: string, rawAddress: string, now: Date, binding: SignInBinding): Promise<IssuedNonce> {
  const address = normalizeWalletAddress(rawAddress)
  const walletType = detectWalletType(address) ?? 'ethereum'
  const nonce = generateNonce()
  const expiresAt = new Date(now.getTime() + NONCE_TTL_MS)
  await db('auth_nonces').insert({ nonce, address, created_at: now, expires_at: expiresAt, used_at: null, purpose: REGISTRATION_PURPOSE, user_id: userId })
  const message = buildSignInMessage(binding, { walletType, address, nonce, issuedAt: now, expiresAt, statement: registrationStatement(userId) })
  return { nonce, address, created_at: now, expires_at: expiresAt, message }
}

/** The address a structured message names (its second line), to know which parser applies. */
function walletTypeOfMessage(message: string) {
  const line = message.split('\n')[1]?.trim() ?? ''
  const type = detectWalletType(line)
  if (!type) throw new ValidationError('invalid request', 'body.message: not a wallet registration message (request one with POST /api/v1/wallet/nonce)')
  return type
}

/**
 * Checks a signed registration message for `userId` without consuming its nonce: 400 when it is
 * not one or lacks the user id, 401 when it is bound elsewhere, its nonce is not this user's
 * usable one for this address, or the wallet did not sign it.
 */
export async function checkRegistration(
  db: Queryable,
  input: { userId: string; message: string; signature: string },
  now: Date,
  binding: SignInBinding,
): Promise<{ wallet: VerifiedWallet; nonce: string }> {
  const type = walletTypeOfMessage(input.message)
  let fields
  try {
    fields = parseSignInMessage(type, input.message)
  } catch (err) {
    if (err instanceof ValidationError) throw new ValidationError('invalid request', err.details)
    throw err
  }
  if (!(fields.statement ?? '').toLowerCase().includes(input.userId.toLowerCase())) {
    throw new ValidationError('invalid request', `body.message: must contain your user id ${input.userId}`)
  }
  const mismatch = bindingMismatch(binding, type, fields)
  if (mismatch !== undefined) throw new UnauthorizedError('registration message not for this service', mismatch)
  const address = normalizeWalletAddress(fields.address)
  const issued = await findNonce(db, fields.nonce)
  const why =
    !issued || issued.purpose !== REGISTRATION_PURPOSE
      ? 'the nonce was not issued for a wallet registration; request one with POST /api/v1/wallet/nonce'
      : issued.user_id !== input.userId
        ? 'the nonce was issued to another user'
        : issued.address !== address
          ? 'the nonce was issued for another address'
          : issued.used_at !== null
            ? 'the nonce was already used; request a new one'
            : issued.expires_at <= now
              ? 'the nonce expired; request a new one'
              : fields.issuedAt !== issued.created_at.toISOString() || fields.expirationTime !== issued.expires_at.toISOString()
                ? "the message's Issued At / Expiration Time are not the ones issued with the nonce"
                : undefined
  if (why !== undefined) throw new UnauthorizedError('invalid nonce', why)
  try {
    return { wallet: verifyWalletSignature({ message: input.message, signature: input.signature, address }), nonce: fields.nonce }
  } catch (err) {
    if (err instanceof ValidationError) throw new ValidationError('invalid request', `body.${err.details}`)
    throw err
  }
}

/** Uses the nonce up (in the registration's transaction); false when another request did first. */
export async function consumeRegistrationNonce(db: Queryable, nonce: string, userId: string, now: Date): Promise<boolean> {
  const updated = await db('auth_nonces')
    .where({ nonce, user_id: userId, purpose: REGISTRATION_PURPOSE })
    .whereNull('used_at')
    .where('expires_at', '>', now)
    .update({ used_at: now })
  return Number(updated) === 1
}
