/**
 * The RS256 key that signs the auth-server's access tokens. It lives in one PKCS#8 PEM file
 * (AUTH_SIGNING_KEY_FILE, default `<data dir>/auth-signing-key.pem`), created on first start
 * with mode 0600. A file that group or others may access is refused, like ssh refuses a private
 * key: anyone who can read it can mint tokens for any user. Every auth-server instance behind one
 * API server must use the same file.
 *
 * The key id (`kid`) is the RFC 7638 JWK thumbprint of the public key, so it is stable across
 * restarts and instances without being stored anywhere.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { calculateJwkThumbprint, exportJWK, type JWK } from 'jose'
import { ConfigError } from '../errors.js'
import type { Logger } from '../log.js'

export const SIGNING_KEY_FILE_NAME = 'auth-signing-key.pem'
export const SIGNING_ALGORITHM = 'RS256'
const MODULUS_BITS = 2048

export interface SigningKey {
  /** Where the key was read from (for messages). */
  file: string
  privateKey: crypto.KeyObject
  /** Public half as a JWK with `kid`, `alg` and `use`, as published in the JWKS. */
  publicJwk: JWK
  kid: string
}

export function defaultSigningKeyFile(dataDir: string): string {
  return path.join(dataDir, SIGNING_KEY_FILE_NAME)
}

/**
 * Reads the key file, or creates it (with a new 2048-bit RSA key) when it does not exist.
 * Throws ConfigError naming the file when it is group/other-accessible, unreadable or not an
 * RSA private key.
 */
export async function loadOrCreateSigningKey(file: string, logger?: Logger): Promise<SigningKey> {
  const absolute = path.resolve(file)
  let pem = readKeyFile(absolute)
  if (pem === undefined) {
    pem = createKeyFile(absolute)
    if (pem === undefined) pem = readKeyFile(absolute) as string
    else logger?.info({ file: absolute }, 'created a new access-token signing key')
  }
  return signingKeyFromPem(pem, absolute)
}

export async function signingKeyFromPem(pem: string, file: string): Promise<SigningKey> {
  let privateKey: crypto.KeyObject
  try {
    privateKey = crypto.createPrivateKey({ key: pem, format: 'pem' })
  } catch {
    throw new ConfigError([`AUTH_SIGNING_KEY_FILE: ${file} is not a PEM private key; remove it to have a new key created, or put a PKCS#8 RSA key there`])
  }
  const bits = privateKey.asymmetricKeyDetails?.modulusLength ?? 0
  if (privateKey.asymmetricKeyType !== 'rsa' || bits < MODULUS_BITS) {
    throw new ConfigError([`AUTH_SIGNING_KEY_FILE: ${file} must hold an RSA key of at least ${MODULUS_BITS} bits for RS256 (found ${privateKey.asymmetricKeyType ?? 'unknown'} ${bits || ''})`.trim()])
  }
  const { kty, n, e } = await exportJWK(crypto.createPublicKey(privateKey))
  const kid = await calculateJwkThumbprint({ kty, n, e }, 'sha256')
  return { file, privateKey, kid, publicJwk: { kty, n, e, kid, alg: SIGNING_ALGORITHM, use: 'sig' } }
}

/** The PEM text, or undefined when there is no file yet. */
function readKeyFile(file: string): string | undefined {
  let stat: fs.Stats
  try {
    stat = fs.statSync(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw new ConfigError([`AUTH_SIGNING_KEY_FILE: cannot read ${file}: ${(err as Error).message}`])
  }
  if (!stat.isFile()) throw new ConfigError([`AUTH_SIGNING_KEY_FILE: ${file} is not a regular file`])
  // Windows has no POSIX modes to check.
  if (process.platform !== 'win32' && (stat.mode & 0o077) !== 0) {
    const mode = (stat.mode & 0o777).toString(8).padStart(4, '0')
    throw new ConfigError([
      `AUTH_SIGNING_KEY_FILE: ${file} has mode ${mode}; the access-token signing key must be readable by its owner only: run \`chmod 600 ${file}\``,
    ])
  }
  try {
    return fs.readFileSync(file, 'utf8')
  } catch (err) {
    throw new ConfigError([`AUTH_SIGNING_KEY_FILE: cannot read ${file}: ${(err as Error).message}`])
  }
}

/**
 * Writes a new key with mode 0600, never over an existing file: the key goes to a temporary
 * file first and is then hard-linked into place, which fails if the name exists. So when two
 * instances start at once, the loser reads the winner's complete key (returns undefined).
 */
function createKeyFile(file: string): string | undefined {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: MODULUS_BITS })
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
  const temporary = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    fs.writeFileSync(temporary, pem, { mode: 0o600, flag: 'wx' })
    fs.linkSync(temporary, file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return undefined
    throw new ConfigError([`AUTH_SIGNING_KEY_FILE: cannot create ${file}: ${(err as Error).message}`])
  } finally {
    fs.rmSync(temporary, { force: true })
  }
  return pem
}
