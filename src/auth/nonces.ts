/**
 * Wallet sign-in challenges (spec: "Auth nonce": single use, 64 random characters, 5 minute
 * lifetime). A nonce is issued for one address and consumed by one atomic update, so of two
 * concurrent sign-ins with the same signed message exactly one succeeds.
 */
import crypto from 'node:crypto'
import type { Queryable } from '../db/knex.js'
import { toDate, toDateOrNull } from '../db/dialect.js'
import { buildSignInMessage, DEFAULT_SIGN_IN_BINDING, type SignInBinding } from './sign-in-message.js'
import { detectWalletType } from './wallet.js'

export const NONCE_LENGTH = 64
export const NONCE_TTL_MS = 5 * 60_000
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
/** Largest multiple of 62 below 256: bytes at or above it are dropped, so no character is favoured. */
const UNBIASED_LIMIT = 256 - (256 % ALPHABET.length)

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

/** `address` must already be normalised (normalizeWalletAddress). */
export async function issueNonce(
  db: Queryable,
  address: string,
  now: Date,
  binding: SignInBinding = DEFAULT_SIGN_IN_BINDING,
  ttlMs: number = NONCE_TTL_MS,
): Promise<IssuedNonce> {
  const nonce = generateNonce()
  const expiresAt = new Date(now.getTime() + ttlMs)
  await db('auth_nonces').insert({ nonce, address, created_at: now, expires_at: expiresAt, used_at: null, purpose: 'sign_in', user_id: null })
  const walletType = detectWalletType(address) ?? 'ethereum'
  const message = buildSignInMessage(binding, { walletType, address, nonce, issuedAt: now, expiresAt })
  return { nonce, address, created_at: now, expires_at: expiresAt, message }
}

export interface NonceRecord {
  nonce: string
  address: string
  purpose: string
  user_id: string | null
  created_at: Date
  expires_at: Date
  used_at: Date | null
}

export async function findNonce(db: Queryable, nonce: string): Promise<NonceRecord | undefined> {
  const row = (await db('auth_nonces').where({ nonce }).first()) as Record<string, unknown> | undefined
  if (!row) return undefined
  return {
    nonce: String(row.nonce),
    address: String(row.address),
    purpose: String(row.purpose ?? 'sign_in'),
    user_id: row.user_id === null || row.user_id === undefined ? null : String(row.user_id),
    created_at: toDate(row.created_at),
    expires_at: toDate(row.expires_at),
    used_at: toDateOrNull(row.used_at),
  }
}

/**
 * Marks the nonce used, if it is unused, unexpired and was issued for `address`. One
 * conditional update, so a replay (or a concurrent second use) changes no row and gets false.
 */
export async function consumeNonce(db: Queryable, nonce: string, address: string, now: Date): Promise<boolean> {
  const updated = await db('auth_nonces')
    .where({ nonce, address, purpose: 'sign_in' })
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
  if ((row.purpose ?? 'sign_in') !== 'sign_in') return 'the nonce was issued for another purpose; request one with GET /auth/nonce'
  if (toDateOrNull(row.used_at) !== null) return 'the nonce was already used; request a new one'
  if (toDate(row.expires_at) <= now) return 'the nonce expired; request a new one'
  return undefined
}

/** Housekeeping: deletes expired nonces (used or not); returns how many. */
export async function purgeExpiredNonces(db: Queryable, now: Date): Promise<number> {
  return Number(await db('auth_nonces').where('expires_at', '<=', now).del())
}
