/**
 * Wallet sign-in challenges (spec: "Auth nonce": single use, 64 random characters, 5 minute
 * lifetime). A nonce is issued for one address and consumed by one atomic update, so of two
 * concurrent sign-ins with the same signed message exactly one succeeds.
 */
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import { toDate, toDateOrNull } from '../db/dialect.js'
import { ValidationError } from '../errors.js'

export const NONCE_LENGTH = 64
export const NONCE_TTL_MS = 5 * 60_000
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
/** Largest multiple of 62 below 256: bytes at or above it are dropped, so no character is favoured. */
const UNBIASED_LIMIT = 256 - (256 % ALPHABET.length)
/** A nonce as a whole word: 64 letters and digits not touching other letters or digits. */
const NONCE_IN_TEXT = /(?<![A-Za-z0-9])[A-Za-z0-9]{64}(?![A-Za-z0-9])/g

export interface IssuedNonce {
  nonce: string
  /** Normalised: EIP-55 for Ethereum, base58 as given for Solana. */
  address: string
  created_at: Date
  expires_at: Date
  /** The exact text the wallet is asked to sign. */
  message: string
}

export function generateNonce(): string {
  let nonce = ''
  while (nonce.length < NONCE_LENGTH) {
    for (const byte of crypto.randomBytes(NONCE_LENGTH)) {
      if (byte < UNBIASED_LIMIT && nonce.length < NONCE_LENGTH) nonce += ALPHABET[byte % ALPHABET.length]
    }
  }
  return nonce
}

/** The sign-in text: names the service, the address (wallet.ts requires it) and the nonce. */
export function signInMessage(address: string, nonce: string, issuedAt: Date, expiresAt: Date): string {
  return [
    'nodeplane wants you to sign in with your wallet:',
    address,
    '',
    'Signing proves you own this wallet. It costs nothing and sends no transaction.',
    '',
    `Nonce: ${nonce}`,
    `Issued At: ${issuedAt.toISOString()}`,
    `Expiration Time: ${expiresAt.toISOString()}`,
  ].join('\n')
}

/** `address` must already be normalised (normalizeWalletAddress). */
export async function issueNonce(db: Queryable, address: string, now: Date, ttlMs: number = NONCE_TTL_MS): Promise<IssuedNonce> {
  const nonce = generateNonce()
  const expiresAt = new Date(now.getTime() + ttlMs)
  await db('auth_nonces').insert({ nonce, address, created_at: now, expires_at: expiresAt, used_at: null })
  return { nonce, address, created_at: now, expires_at: expiresAt, message: signInMessage(address, nonce, now, expiresAt) }
}

/**
 * The nonce a signed message carries: the one 64-character word of letters and digits in it.
 * Our own message has it on the `Nonce:` line; a client composing its own text (an EIP-4361
 * message, say) only has to include it. Throws ValidationError when there is none, or several.
 */
export function nonceFromMessage(message: string): string {
  const found = [...new Set([...message.matchAll(NONCE_IN_TEXT)].map((m) => m[0]))]
  if (found.length === 1) return found[0] as string
  if (found.length === 0) throw new ValidationError('message carries no nonce', 'message: must contain the nonce from GET /auth/nonce')
  throw new ValidationError('message carries more than one nonce', 'message: must contain exactly one nonce from GET /auth/nonce')
}

/**
 * Marks the nonce used, if it is unused, unexpired and was issued for `address`. One
 * conditional update, so a replay (or a concurrent second use) changes no row and gets false.
 */
export async function consumeNonce(db: Queryable, nonce: string, address: string, now: Date): Promise<boolean> {
  const updated = await db('auth_nonces')
    .where({ nonce, address })
    .whereNull('used_at')
    .where('expires_at', '>', now)
    .update({ used_at: now })
  return Number(updated) === 1
}

/** Why a nonce cannot be used, for the 401's details; undefined when it can. */
export async function whyNonceUnusable(db: Queryable, nonce: string, address: string, now: Date): Promise<string | undefined> {
  const row = (await db('auth_nonces').where({ nonce }).first()) as Record<string, unknown> | undefined
  if (!row) return 'the nonce was not issued by this server; request one with GET /auth/nonce'
  if (row.address !== address) return 'the nonce was issued for another address; request one for this address'
  if (toDateOrNull(row.used_at) !== null) return 'the nonce was already used; request a new one'
  if (toDate(row.expires_at) <= now) return 'the nonce expired; request a new one'
  return undefined
}

/** Housekeeping: deletes expired nonces (used or not); returns how many. */
export async function purgeExpiredNonces(db: Queryable, now: Date): Promise<number> {
  return Number(await db('auth_nonces').where('expires_at', '<=', now).del())
}
