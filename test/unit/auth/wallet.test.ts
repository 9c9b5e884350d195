import bs58 from 'bs58'
import { getBytes, SigningKey, Wallet } from 'ethers'
import nacl from 'tweetnacl'
import { describe, expect, it } from 'vitest'
import { detectWalletType, normalizeWalletAddress, verifyWalletSignature } from '../../../src/auth/wallet.js'
import { UnauthorizedError, ValidationError } from '../../../src/errors.js'

const USER = '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b'

function solana() {
  const pair = nacl.sign.keyPair()
  const address = bs58.encode(pair.publicKey)
  return { pair, address, sign: (m: string) => bs58.encode(nacl.sign.detached(new TextEncoder().encode(m), pair.secretKey)) }
}

describe('detectWalletType', () => {
  it('tells the address formats apart', () => {
    expect(detectWalletType('0x52908400098527886E0F7030069857D2E4169EE7')).toBe('ethereum')
    expect(detectWalletType('0x52908400098527886e0f7030069857d2e4169ee7')).toBe('ethereum')
    expect(detectWalletType(solana().address)).toBe('solana')
    expect(detectWalletType('0x1234')).toBeUndefined()
    // Base58 but not 32 bytes.
    expect(detectWalletType('3mJr7AoUXx2Wqd')).toBeUndefined()
    expect(detectWalletType('')).toBeUndefined()
  })

  it('normalises Ethereum addresses to EIP-55 and keeps Solana ones', () => {
    expect(normalizeWalletAddress('0x52908400098527886e0f7030069857d2e4169ee7')).toBe('0x52908400098527886E0F7030069857D2E4169EE7')
    const { address } = solana()
    expect(normalizeWalletAddress(address)).toBe(address)
    expect(() => normalizeWalletAddress('nope')).toThrow(ValidationError)
  })
})

describe('verifyWalletSignature (Ethereum)', () => {
  const wallet = Wallet.createRandom()
  const message = `Sign in as ${wallet.address} (user ${USER}), nonce abc`

  it('recovers the signer, the EIP-55 address and the uncompressed public key', async () => {
    const result = verifyWalletSignature({ message, signature: await wallet.signMessage(message) })
    expect(result.walletType).toBe('ethereum')
    expect(result.address).toBe(wallet.address)
    expect(result.publicKey).toEqual(getBytes(new SigningKey(wallet.privateKey).publicKey))
    expect(result.publicKey).toHaveLength(65)
  })

  it('checks a claimed address, in any case', async () => {
    const signature = await wallet.signMessage(message)
    expect(verifyWalletSignature({ message, signature, address: wallet.address.toLowerCase() }).address).toBe(wallet.address)
    const other = Wallet.createRandom()
    expect(() => verifyWalletSignature({ message: `${message} ${other.address}`, signature, address: other.address })).toThrow(UnauthorizedError)
    // The claimed address must be in the message.
    expect(() => verifyWalletSignature({ message, signature, address: other.address })).toThrow(ValidationError)
  })

  it('refuses a signature by another key (401) and malformed input (400)', async () => {
    const other = Wallet.createRandom()
    expect(() => verifyWalletSignature({ message, signature: '' })).toThrow(ValidationError)
    const byOther = await other.signMessage(message)
    expect(() => verifyWalletSignature({ message, signature: byOther })).toThrow(UnauthorizedError)
    const own = await wallet.signMessage(message)
    expect(() => verifyWalletSignature({ message: `${message}.`, signature: own })).toThrow(UnauthorizedError)
    expect(() => verifyWalletSignature({ message, signature: '0xdeadbeef' })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message, signature: `0x${'ff'.repeat(65)}` })).toThrow(ValidationError)
    const plain = await wallet.signMessage('no address here')
    expect(() => verifyWalletSignature({ message: 'no address here', signature: plain })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message: 'x'.repeat(5000), signature: byOther })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message, signature: byOther, address: 'garbage' })).toThrow(ValidationError)
  })
})

describe('verifyWalletSignature (Solana)', () => {
  it('verifies Ed25519 over the UTF-8 message and returns the 32-byte key', () => {
    const w = solana()
    const message = `Sign in as ${w.address} — user ${USER} ✓`
    const result = verifyWalletSignature({ message, signature: w.sign(message) })
    expect(result).toEqual({ address: w.address, walletType: 'solana', publicKey: w.pair.publicKey })
    expect(verifyWalletSignature({ message, signature: w.sign(message), address: w.address }).address).toBe(w.address)
  })

  it('refuses another signer (401) and malformed signatures (400)', () => {
    const w = solana()
    const other = solana()
    const message = `Sign in as ${w.address}`
    expect(() => verifyWalletSignature({ message, signature: other.sign(message) })).toThrow(UnauthorizedError)
    expect(() => verifyWalletSignature({ message: `${message} as ${other.address}`, signature: w.sign(message) })).toThrow(UnauthorizedError)
    expect(() => verifyWalletSignature({ message, signature: bs58.encode(new Uint8Array(63)) })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message, signature: 'l0O' })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message: 'no address', signature: w.sign('no address') })).toThrow(ValidationError)
    expect(() => verifyWalletSignature({ message, signature: w.sign(message), address: other.address })).toThrow(ValidationError)
  })
})
