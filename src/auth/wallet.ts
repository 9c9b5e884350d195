/**
 * Wallet signature verification (spec: Authentication, "Wallet registration"), shared by the
 * API server's `POST /api/v1/wallet/register-public-key` and the auth server's legacy wallet
 * sign-in. Pure functions, no I/O.
 *
 * - Ethereum: EIP-191 `personal_sign` over the message; the signature is 65 bytes hex
 *   (`0x` + 130 hex digits). The signer address is recovered from the signature.
 * - Solana: Ed25519 over the UTF-8 bytes of the message; the signature is base58 (64 bytes) and
 *   the address is the base58 public key (32 bytes).
 *
 * In both cases the message must name the address that signed it, so what the user claims (the
 * address in the text they signed) is checked against the key that actually signed.
 */
import bs58 from 'bs58'
// ethers' subpaths: its index loads the whole library (providers, contracts, wallets), ~3x the time.
import { getAddress } from 'ethers/address'
import { SigningKey } from 'ethers/crypto'
import { hashMessage, verifyMessage } from 'ethers/hash'
import { getBytes } from 'ethers/utils'
import nacl from 'tweetnacl'
import { UnauthorizedError, ValidationError } from '../errors.js'

export type WalletType = 'ethereum' | 'solana'

export interface VerifyWalletSignatureInput {
  /** The exact text that was signed. */
  message: string
  /** Ethereum: `0x` + 130 hex digits; Solana: base58 of 64 bytes. */
  signature: string
  /**
   * The address the caller claims. When absent, the address is taken from the message (the
   * Ethereum address recovered from the signature, or the Solana address the message names).
   */
  address?: string
}

export interface VerifiedWallet {
  /** Ethereum in EIP-55 checksummed form; Solana base58 as given. */
  address: string
  walletType: WalletType
  /** Ethereum: the uncompressed secp256k1 public key (65 bytes, 0x04 prefix); Solana: 32 bytes. */
  publicKey: Uint8Array
}

/** Upper bound on the signed text; a sign-in or registration message is a few lines. */
export const MAX_WALLET_MESSAGE_LENGTH = 4096

const ETHEREUM_ADDRESS = /^0x[0-9a-fA-F]{40}$/
const ETHEREUM_ADDRESS_IN_TEXT = /0x[0-9a-fA-F]{40}(?![0-9a-fA-F])/g
const ETHEREUM_SIGNATURE = /^(0x)?[0-9a-fA-F]{130}$/
const BASE58_WORD = /[1-9A-HJ-NP-Za-km-z]{32,44}/g
const BASE58 = /^[1-9A-HJ-NP-Za-km-z]+$/

/** The wallet type an address belongs to, from its format; undefined when it is neither. */
export function detectWalletType(address: string): WalletType | undefined {
  if (ETHEREUM_ADDRESS.test(address)) return 'ethereum'
  if (isSolanaAddress(address)) return 'solana'
  return undefined
}

export function isSolanaAddress(address: string): boolean {
  return decodeBase58(address)?.length === 32
}

/** The form an address is stored and compared in: EIP-55 for Ethereum, as-is for Solana. */
export function normalizeWalletAddress(address: string): string {
  const type = detectWalletType(address)
  if (type === 'ethereum') return getAddress(address.toLowerCase())
  if (type === 'solana') return address
  throw new ValidationError('address is neither an Ethereum nor a Solana address', `address: "${address.slice(0, 60)}" is neither 0x + 40 hex (Ethereum) nor base58 of 32 bytes (Solana)`)
}

/**
 * Checks that `signature` was made over `message` by the wallet the message names.
 * Throws ValidationError (400) when the input is malformed, UnauthorizedError (401) when the
 * signature does not match the address.
 */
export function verifyWalletSignature(input: VerifyWalletSignatureInput): VerifiedWallet {
  const { message, signature } = input
  if (typeof message !== 'string' || message.trim() === '') throw new ValidationError('message is required', 'message: must be a non-empty string')
  if (message.length > MAX_WALLET_MESSAGE_LENGTH) {
    throw new ValidationError('message is too long', `message: at most ${MAX_WALLET_MESSAGE_LENGTH} characters`)
  }
  if (typeof signature !== 'string' || signature.trim() === '') throw new ValidationError('signature is required', 'signature: must be a non-empty string')
  const sig = signature.trim()

  let type: WalletType
  if (input.address !== undefined) {
    const detected = detectWalletType(input.address)
    if (!detected) throw new ValidationError('address is neither an Ethereum nor a Solana address', `address: "${input.address.slice(0, 60)}" is neither 0x + 40 hex (Ethereum) nor base58 of 32 bytes (Solana)`)
    type = detected
  } else if (ETHEREUM_SIGNATURE.test(sig)) {
    type = 'ethereum'
  } else if (decodeBase58(sig)?.length === 64) {
    type = 'solana'
  } else {
    throw new ValidationError(
      'signature is neither an Ethereum nor a Solana signature',
      'signature: expected 0x + 130 hex digits (Ethereum personal_sign) or base58 of 64 bytes (Solana Ed25519)',
    )
  }
  return type === 'ethereum' ? verifyEthereum(message, sig, input.address) : verifySolana(message, sig, input.address)
}

function verifyEthereum(message: string, signature: string, claimed: string | undefined): VerifiedWallet {
  if (!ETHEREUM_SIGNATURE.test(signature)) {
    throw new ValidationError('malformed Ethereum signature', 'signature: expected 0x + 130 hex digits (EIP-191 personal_sign)')
  }
  const sigHex = signature.startsWith('0x') ? signature : `0x${signature}`
  const named = [...message.matchAll(ETHEREUM_ADDRESS_IN_TEXT)].map((m) => m[0].toLowerCase())
  if (claimed !== undefined && !named.includes(claimed.toLowerCase())) {
    throw new ValidationError('message does not name the wallet address', `message: must contain the address ${claimed}`)
  }
  if (named.length === 0) throw new ValidationError('message does not name an Ethereum address', 'message: must contain the signing address (0x…)')

  let recovered: string
  let publicKey: Uint8Array
  try {
    recovered = verifyMessage(message, sigHex)
    publicKey = getBytes(SigningKey.recoverPublicKey(hashMessage(message), sigHex))
  } catch {
    // ethers rejects signatures whose r/s/v are out of range: the bytes are not a signature.
    throw new ValidationError('malformed Ethereum signature', 'signature: r, s or v out of range')
  }
  const ok = claimed !== undefined ? recovered.toLowerCase() === claimed.toLowerCase() : named.includes(recovered.toLowerCase())
  if (!ok) throw new UnauthorizedError('wallet signature does not match the address', 'the signature was not made by the address the message names')
  return { address: getAddress(recovered), walletType: 'ethereum', publicKey }
}

function verifySolana(message: string, signature: string, claimed: string | undefined): VerifiedWallet {
  const sigBytes = decodeBase58(signature)
  if (sigBytes?.length !== 64) throw new ValidationError('malformed Solana signature', 'signature: expected base58 of 64 bytes (Ed25519)')
  const named = [...new Set([...message.matchAll(BASE58_WORD)].map((m) => m[0]).filter(isSolanaAddress))]
  let candidates: string[]
  if (claimed !== undefined) {
    if (!message.includes(claimed)) throw new ValidationError('message does not name the wallet address', `message: must contain the address ${claimed}`)
    candidates = [claimed]
  } else {
    if (named.length === 0) throw new ValidationError('message does not name a Solana address', 'message: must contain the signing address (base58)')
    candidates = named
  }
  const bytes = new TextEncoder().encode(message)
  for (const address of candidates) {
    const publicKey = decodeBase58(address) as Uint8Array
    if (nacl.sign.detached.verify(bytes, sigBytes, publicKey)) return { address, walletType: 'solana', publicKey }
  }
  throw new UnauthorizedError('wallet signature does not match the address', 'the signature was not made by the address the message names')
}

function decodeBase58(value: string): Uint8Array | undefined {
  if (!BASE58.test(value)) return undefined
  try {
    return bs58.decode(value)
  } catch {
    return undefined
  }
}
