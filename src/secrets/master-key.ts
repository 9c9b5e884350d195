/**
 * The top of the key hierarchy (spec: "master key (never leaves the secrets manager) encrypts a
 * 32-byte data key per node"). Everything else in src/secrets reaches the master key only through
 * `MasterKey`, so the embedded local file can be swapped for a real secrets manager without
 * touching the rest. docs/secrets.md describes the contract for adapter authors.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { ConfigError, ConflictError, DomainError } from '../errors.js'
import { KeyMaterialError } from './errors.js'
import type { SecretsRuntime } from './load-settings.js'
import { VaultTransitMasterKey } from './vault/transit-master-key.js'

/**
 * What the key hierarchy needs from a secrets manager: encrypt ("wrap") and decrypt ("unwrap")
 * small secrets (data keys, server secret keys) under a key that never leaves the manager.
 *
 * Contract for an adapter (e.g. Vault transit: `wrap` = POST transit/encrypt/<name>, `unwrap` =
 * POST transit/decrypt/<name>, both remote calls):
 * - `id` names the master key `wrap` uses; it is stored next to every wrapped value, so it must be
 *   stable across restarts (and across the manager's own key-version rotations, when `unwrap` still
 *   opens older versions), identical on every server sharing a database, and reveal nothing of the
 *   key.
 * - `wrap` returns self-describing text (at most a few hundred characters for a 64-byte input):
 *   whatever `unwrap` needs besides the key itself (version, nonce, tag) is inside it.
 * - `unwrap` returns the exact bytes given to `wrap`, or throws (KeyMaterialError) when the text
 *   was altered or wrapped by a key this adapter cannot use. It must never return wrong bytes.
 * - Both may be slow (network); callers unwrap once per operation, not per key.
 */
export interface MasterKey {
  readonly id: string
  wrap(plaintext: Uint8Array): Promise<string>
  unwrap(wrapped: string): Promise<Uint8Array>
}

export const MASTER_KEY_BYTES = 32
export const MASTER_KEY_FILE_NAME = 'master.key'

const FORMAT = 'local'
const FORMAT_VERSION = 'v1'
const IV_BYTES = 12

/** What `openMasterKey` reads from the configuration (secretsEnv plus the data dir). */
export interface SecretsSettings {
  NODEPLANE_DATA_DIR: string
  SECRETS_PROVIDER: 'local' | 'vault'
  SECRETS_MASTER_KEY_FILE?: string | undefined
}

/** The master key file: SECRETS_MASTER_KEY_FILE, or `<data dir>/master.key`; always absolute. */
export function masterKeyFile(settings: Pick<SecretsSettings, 'NODEPLANE_DATA_DIR' | 'SECRETS_MASTER_KEY_FILE'>): string {
  return path.resolve(settings.SECRETS_MASTER_KEY_FILE ?? path.join(settings.NODEPLANE_DATA_DIR, MASTER_KEY_FILE_NAME))
}

/**
 * The configured adapter. Throws ConfigError (MasterKeyMissingError when there is no key file
 * yet; with Vault, when the transit key cannot be used), so a daemon exits 78 at start rather
 * than failing its first provisioning.
 */
export async function openMasterKey(settings: SecretsSettings, secrets?: Pick<SecretsRuntime, 'vault'>): Promise<MasterKey> {
  switch (settings.SECRETS_PROVIDER) {
    case 'local':
      return LocalFileMasterKey.load(masterKeyFile(settings))
    case 'vault': {
      const vault = secrets?.vault
      if (!vault) throw new ConfigError(['SECRETS_PROVIDER=vault: this command does not connect to Vault (settings loaded without loadSettingsWithSecrets)'])
      const masterKey = new VaultTransitMasterKey(vault.client, vault.transitMount, vault.transitKey)
      await assertTransitKeyUsable(masterKey)
      return masterKey
    }
  }
}

/** One wrap and unwrap of random bytes: the key exists and the policy grants both paths. */
async function assertTransitKeyUsable(masterKey: VaultTransitMasterKey): Promise<void> {
  const probe = crypto.randomBytes(16)
  try {
    const back = await masterKey.unwrap(await masterKey.wrap(probe))
    if (!crypto.timingSafeEqual(Buffer.from(back), probe)) throw new Error('decrypt returned other bytes than were encrypted')
  } catch (err) {
    const reason = err instanceof DomainError ? err.details : (err as Error).message
    throw new ConfigError([`VAULT_TRANSIT_KEY: transit key ${masterKey.mount}/${masterKey.keyName} is not usable: ${reason}`])
  }
}

/** No master key file yet: `nodeplane secrets init` creates one. */
export class MasterKeyMissingError extends ConfigError {
  constructor(readonly file: string) {
    super([`SECRETS_MASTER_KEY_FILE: ${file} does not exist; run \`nodeplane secrets init\` to create the master key`])
  }
}

/**
 * The id of a master key: SHA-256 over a fixed label and the key, first 16 hex digits. It tells
 * keys apart without revealing anything usable about them.
 */
export function masterKeyId(key: Uint8Array): string {
  return crypto.createHash('sha256').update('nodeplane master key id\0').update(key).digest('hex').slice(0, 16)
}

/**
 * The embedded adapter: a 32-byte key in a file readable by its owner only, AES-256-GCM wrapping.
 * Wrapped text: `local:v1:<key id>:<iv>:<tag>:<ciphertext>` (base64url parts); the
 * `local:v1:<key id>` prefix is the AEAD's associated data, so it cannot be edited either.
 */
export class LocalFileMasterKey implements MasterKey {
  readonly id: string
  readonly #key: crypto.KeyObject

  private constructor(
    key: Uint8Array,
    /** Where the key was read from (for messages). */
    readonly file: string,
  ) {
    this.id = masterKeyId(key)
    this.#key = crypto.createSecretKey(key)
  }

  /**
   * Reads the key file. Refuses (ConfigError naming the file) a file group or others may access,
   * one that does not hold exactly 32 bytes, and a missing one (MasterKeyMissingError).
   */
  static async load(file: string): Promise<LocalFileMasterKey> {
    const absolute = path.resolve(file)
    const bytes = readMasterKeyFile(absolute)
    try {
      return new LocalFileMasterKey(bytes, absolute)
    } finally {
      bytes.fill(0)
    }
  }

  /** For tests and adapters built from key bytes held elsewhere; the bytes are copied. */
  static fromBytes(key: Uint8Array, file = '<memory>'): LocalFileMasterKey {
    if (key.length !== MASTER_KEY_BYTES) throw new Error(`a master key is ${MASTER_KEY_BYTES} bytes, not ${key.length}`)
    return new LocalFileMasterKey(key, file)
  }

  async wrap(plaintext: Uint8Array): Promise<string> {
    const header = `${FORMAT}:${FORMAT_VERSION}:${this.id}`
    const iv = crypto.randomBytes(IV_BYTES)
    const cipher = crypto.createCipheriv('aes-256-gcm', this.#key, iv)
    cipher.setAAD(Buffer.from(header, 'utf8'))
    const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()])
    return [header, b64(iv), b64(cipher.getAuthTag()), b64(ciphertext)].join(':')
  }

  async unwrap(wrapped: string): Promise<Uint8Array> {
    const parts = wrapped.split(':')
    if (parts.length !== 6 || parts[0] !== FORMAT || parts[1] !== FORMAT_VERSION) {
      throw new KeyMaterialError('cannot unwrap key material', `not a ${FORMAT}:${FORMAT_VERSION} wrapped value (another secrets provider?)`)
    }
    const [format, version, keyId, iv, tag, ciphertext] = parts as [string, string, string, string, string, string]
    if (keyId !== this.id) {
      throw new KeyMaterialError(
        'cannot unwrap key material',
        `it was wrapped by master key ${keyId.slice(0, 32)}, but ${this.file} holds master key ${this.id}; every server sharing a database needs the same master key file`,
      )
    }
    try {
      const decipher = crypto.createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'))
      decipher.setAAD(Buffer.from(`${format}:${version}:${keyId}`, 'utf8'))
      decipher.setAuthTag(Buffer.from(tag, 'base64url'))
      return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()])
    } catch {
      throw new KeyMaterialError('cannot unwrap key material', `the wrapped value does not authenticate under master key ${this.id} (altered or truncated)`)
    }
  }
}

function b64(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64url')
}

/** What a look at the key file found, without reading the key into anything longer-lived. */
export type MasterKeyFileCheck =
  | { ok: true; file: string; masterKeyId: string }
  | { ok: false; file: string; present: boolean; problem: string }

/** For `secrets status`: the same checks as loading, reported instead of thrown. */
export function checkMasterKeyFile(file: string): MasterKeyFileCheck {
  const absolute = path.resolve(file)
  try {
    const bytes = readMasterKeyFile(absolute)
    const id = masterKeyId(bytes)
    bytes.fill(0)
    return { ok: true, file: absolute, masterKeyId: id }
  } catch (err) {
    return { ok: false, file: absolute, present: !(err instanceof MasterKeyMissingError), problem: err instanceof ConfigError ? err.problems.join('; ') : String(err) }
  }
}

/**
 * The key bytes. The file holds the key as base64 (what `secrets init` writes) or 64 hex digits,
 * so `openssl rand -base64 32` or `-hex 32` works too. Raw bytes are not accepted: 32 characters
 * of text would pass for a key.
 */
function readMasterKeyFile(file: string): Buffer {
  let stat: fs.Stats
  try {
    stat = fs.statSync(file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new MasterKeyMissingError(file)
    throw new ConfigError([`SECRETS_MASTER_KEY_FILE: cannot read ${file}: ${(err as Error).message}`])
  }
  if (!stat.isFile()) throw new ConfigError([`SECRETS_MASTER_KEY_FILE: ${file} is not a regular file`])
  // Windows has no POSIX modes to check.
  if (process.platform !== 'win32' && (stat.mode & 0o077) !== 0) {
    const mode = (stat.mode & 0o777).toString(8).padStart(4, '0')
    throw new ConfigError([
      `SECRETS_MASTER_KEY_FILE: ${file} has mode ${mode}; the master key must be readable by its owner only: run \`chmod 600 ${file}\``,
    ])
  }
  let raw: Buffer
  try {
    raw = fs.readFileSync(file)
  } catch (err) {
    throw new ConfigError([`SECRETS_MASTER_KEY_FILE: cannot read ${file}: ${(err as Error).message}`])
  }
  const key = decodeKey(raw)
  raw.fill(0)
  if (!key) {
    throw new ConfigError([
      `SECRETS_MASTER_KEY_FILE: ${file} does not hold a ${MASTER_KEY_BYTES}-byte key (base64 or 64 hex digits)`,
    ])
  }
  return key
}

function decodeKey(raw: Buffer): Buffer | undefined {
  const text = raw.toString('latin1').trim()
  if (/^[0-9a-fA-F]{64}$/.test(text)) return Buffer.from(text, 'hex')
  if (/^[A-Za-z0-9+/]{43}=$/.test(text) || /^[A-Za-z0-9_-]{43}$/.test(text)) {
    const key = Buffer.from(text, text.includes('=') || /[+/]/.test(text) ? 'base64' : 'base64url')
    return key.length === MASTER_KEY_BYTES ? key : undefined
  }
  return undefined
}

/**
 * Creates a new key file with mode 0600, never over an existing file: the key goes to a temporary
 * file first and is then hard-linked into place, which fails if the name exists, so no reader ever
 * sees a half-written key. Throws ConflictError when the file already exists.
 */
export async function createLocalMasterKey(file: string): Promise<LocalFileMasterKey> {
  const absolute = path.resolve(file)
  const key = crypto.randomBytes(MASTER_KEY_BYTES)
  const temporary = `${absolute}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`
  try {
    fs.mkdirSync(path.dirname(absolute), { recursive: true, mode: 0o700 })
    fs.writeFileSync(temporary, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' })
    fs.linkSync(temporary, absolute)
    return LocalFileMasterKey.fromBytes(key, absolute)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new ConflictError(
        `the master key file ${absolute} already exists`,
        'it is never overwritten (every wrapped key depends on it); `nodeplane secrets status` shows its state',
      )
    }
    throw new ConfigError([`SECRETS_MASTER_KEY_FILE: cannot create ${absolute}: ${(err as Error).message}`])
  } finally {
    key.fill(0)
    fs.rmSync(temporary, { force: true })
  }
}

/** For `nodeplane up`: the key file, created first when it does not exist yet. */
export async function ensureLocalMasterKey(file: string): Promise<{ masterKey: LocalFileMasterKey; created: boolean }> {
  try {
    return { masterKey: await LocalFileMasterKey.load(file), created: false }
  } catch (err) {
    if (!(err instanceof MasterKeyMissingError)) throw err
  }
  try {
    return { masterKey: await createLocalMasterKey(file), created: true }
  } catch (err) {
    // Another process created it between our two looks: use theirs.
    if (err instanceof ConflictError) return { masterKey: await LocalFileMasterKey.load(file), created: false }
    throw err
  }
}
