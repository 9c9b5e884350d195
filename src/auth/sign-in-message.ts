/**
 * The wallet sign-in message (docs/auth.md, "Wallet sign-in"): bound to this service's domain,
 * URI and chain, so a phishing site that relays our nonce to a victim gets a message naming its
 * own domain (which a wallet shows, and which we refuse) or ours (which the victim's wallet
 * warns about on another site).
 *
 * - Ethereum: Sign-In with Ethereum (EIP-4361), built and parsed by the `siwe` package.
 * - Solana: the same fields in the same layout ("… wants you to sign in with your Solana
 *   account:"), parsed strictly here: every line in order, nothing else.
 */
import { SiweMessage } from 'siwe'
import { ValidationError } from '../errors.js'
import type { WalletType } from './wallet.js'

export interface SignInBinding {
  /** AUTH_SIWE_DOMAIN: the host (and port) of the site users sign in on, as EIP-4361's `domain`. */
  domain: string
  /** AUTH_SIWE_URI: the URI the signature is for. */
  uri: string
  /** AUTH_SIWE_CHAIN_ID: the EIP-155 chain id in Ethereum messages. */
  ethereumChainId: number
  /** AUTH_SIWE_SOLANA_CHAIN: the `Chain ID` line of Solana messages (a cluster name). */
  solanaChain: string
}

export const DEFAULT_SIGN_IN_BINDING: SignInBinding = { domain: 'localhost', uri: 'http://localhost', ethereumChainId: 1, solanaChain: 'mainnet' }

export const SIGN_IN_STATEMENT = 'Sign in to nodeplane. Signing costs nothing and sends no transaction.'

export interface SignInFields {
  domain: string
  address: string
  statement: string | undefined
  uri: string
  version: string
  chainId: string
  nonce: string
  issuedAt: string
  expirationTime: string | undefined
  /** The parsed SIWE message (Ethereum only), for the siwe package's own verification. */
  siwe?: SiweMessage
}

export interface NewSignInMessage {
  walletType: WalletType
  address: string
  nonce: string
  issuedAt: Date
  expiresAt: Date
  statement?: string
}

export function buildSignInMessage(binding: SignInBinding, input: NewSignInMessage): string {
  const statement = input.statement ?? SIGN_IN_STATEMENT
  if (input.walletType === 'ethereum') {
    return new SiweMessage({
      domain: binding.domain,
      address: input.address,
      statement,
      uri: binding.uri,
      version: '1',
      chainId: binding.ethereumChainId,
      nonce: input.nonce,
      issuedAt: input.issuedAt.toISOString(),
      expirationTime: input.expiresAt.toISOString(),
    }).prepareMessage()
  }
  return [
    `${binding.domain} wants you to sign in with your Solana account:`,
    input.address,
    '',
    statement,
    '',
    `URI: ${binding.uri}`,
    'Version: 1',
    `Chain ID: ${binding.solanaChain}`,
    `Nonce: ${input.nonce}`,
    `Issued At: ${input.issuedAt.toISOString()}`,
    `Expiration Time: ${input.expiresAt.toISOString()}`,
  ].join('\n')
}

const SOLANA_MESSAGE =
  /^(?<domain>[^\s/]{1,253}) wants you to sign in with your Solana account:\n(?<address>[1-9A-HJ-NP-Za-km-z]{32,44})\n\n(?<statement>[^\n]{1,512})\n\nURI: (?<uri>\S{1,512})\nVersion: (?<version>1)\nChain ID: (?<chain>[a-z0-9-]{1,64})\nNonce: (?<nonce>[A-Za-z0-9]{8,64})\nIssued At: (?<issued>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?Z)\nExpiration Time: (?<expires>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?Z)$/

/** Parses a signed sign-in message; 400 (ValidationError naming body.message) when it is not one. */
export function parseSignInMessage(walletType: WalletType, message: string): SignInFields {
  if (walletType === 'ethereum') {
    let siwe: SiweMessage
    try {
      siwe = new SiweMessage(message)
    } catch (err) {
      const why = err instanceof Error ? err.message.split('\n')[0] : 'not an EIP-4361 message'
      throw new ValidationError('invalid sign-in message', `body.message: not a Sign-In with Ethereum (EIP-4361) message: ${String(why).slice(0, 200)}`)
    }
    return {
      domain: siwe.domain,
      address: siwe.address,
      statement: siwe.statement,
      uri: siwe.uri,
      version: siwe.version,
      chainId: String(siwe.chainId),
      nonce: siwe.nonce,
      issuedAt: siwe.issuedAt ?? '',
      expirationTime: siwe.expirationTime,
      siwe,
    }
  }
  const match = SOLANA_MESSAGE.exec(message)
  const g = match?.groups
  if (!g) {
    throw new ValidationError('invalid sign-in message', 'body.message: not a nodeplane Solana sign-in message (see docs/auth.md, "Wallet sign-in")')
  }
  return {
    domain: g.domain as string,
    address: g.address as string,
    statement: g.statement,
    uri: g.uri as string,
    version: g.version as string,
    chainId: g.chain as string,
    nonce: g.nonce as string,
    issuedAt: g.issued as string,
    expirationTime: g.expires,
  }
}

/** Why the message is not bound to this service, for a 401's details; undefined when it is. */
export function bindingMismatch(binding: SignInBinding, walletType: WalletType, fields: SignInFields): string | undefined {
  if (fields.domain !== binding.domain) return `the message is for domain "${fields.domain.slice(0, 100)}", not ${binding.domain}`
  if (fields.uri !== binding.uri) return `the message is for URI "${fields.uri.slice(0, 200)}", not ${binding.uri}`
  const chain = walletType === 'ethereum' ? String(binding.ethereumChainId) : binding.solanaChain
  if (fields.chainId !== chain) return `the message is for chain id ${fields.chainId.slice(0, 64)}, not ${chain}`
  return undefined
}
