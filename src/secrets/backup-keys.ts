/**
 * Node backups (migration snapshots in the backup store) are encrypted at rest under a key
 * derived from the node's data key, so deleting the data key at termination destroys every copy
 * of the backup wherever it lies (crypto-shredding), even one a failed delete left behind.
 *
 *   backup key = HKDF-SHA256(ikm = node data key, salt = none,
 *                            info = "nodeplane backup key v1" \0 node id \0 backup id), 32 bytes
 *
 * The control plane derives it and hands it to the agent only sealed to that agent's X25519 key
 * (in the backup / restore command), so command rows and journals hold nothing that opens a
 * backup. The agent encrypts each file of the snapshot on its own:
 *
 *   file = "NPB1" (4) || iv (12) || AES-256-GCM ciphertext || tag (16)
 *
 * with associated data "nodeplane backup v1" \0 backup id \0 path in the snapshot, so a file
 * moved to another path or another backup does not decrypt. A fresh random iv per file; one
 * file under one key stays far below GCM's 64 GiB limit per message for any chain we host.
 */
import crypto from 'node:crypto'
import fsp from 'node:fs/promises'
import type { DataKey } from './data-keys.js'

export const BACKUP_KEY_BYTES = 32
export const BACKUP_CIPHER = 'aes-256-gcm'
/** The manifest's `encryption.format` for files laid out as below. */
export const BACKUP_FORMAT = 'nodeplane-backup-v1'

const MAGIC = Buffer.from('NPB1', 'ascii')
const IV_BYTES = 12
const TAG_BYTES = 16
const HEADER_BYTES = MAGIC.length + IV_BYTES

/** The key of one backup of the data key's node. The caller overwrites it once done. */
export function deriveBackupKey(dataKey: DataKey, backupId: string): Buffer {
  const info = Buffer.from(`nodeplane backup key v1\0${dataKey.nodeId}\0${backupId}`, 'utf8')
  return Buffer.from(crypto.hkdfSync('sha256', dataKey.bytes, Buffer.alloc(0), info, BACKUP_KEY_BYTES))
}

function associatedData(backupId: string, relativePath: string): Buffer {
  return Buffer.from(`nodeplane backup v1\0${backupId}\0${relativePath}`, 'utf8')
}

export class BackupDecryptionError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'BackupDecryptionError'
  }
}

/**
 * Encrypts `source` into a new file `target` (created with `mode`, never over an existing one).
 * Returns the plaintext size. A source that vanishes (ENOENT) throws before `target` is created.
 */
export async function encryptBackupFile(key: Uint8Array, backupId: string, relativePath: string, source: string, target: string, mode: number): Promise<number> {
  const input = await fsp.open(source, 'r')
  try {
    const iv = crypto.randomBytes(IV_BYTES)
    const cipher = crypto.createCipheriv(BACKUP_CIPHER, key, iv)
    cipher.setAAD(associatedData(backupId, relativePath))
    const output = await fsp.open(target, 'wx', mode)
    let size = 0
    try {
      await output.write(Buffer.concat([MAGIC, iv]))
      for await (const chunk of input.createReadStream({ autoClose: false }) as AsyncIterable<Buffer>) {
        size += chunk.length
        const encrypted = cipher.update(chunk)
        if (encrypted.length > 0) await output.write(encrypted)
      }
      const last = cipher.final()
      if (last.length > 0) await output.write(last)
      await output.write(cipher.getAuthTag())
    } catch (err) {
      await output.close()
      await fsp.rm(target, { force: true })
      throw err
    }
    await output.close()
    return size
  } finally {
    await input.close()
  }
}

/**
 * Decrypts `source` into a new file `target`. Throws BackupDecryptionError (and removes `target`)
 * when the file is not this backup's file at this path under this key; the caller must not use
 * anything written before that error.
 */
export async function decryptBackupFile(key: Uint8Array, backupId: string, relativePath: string, source: string, target: string, mode: number): Promise<number> {
  const input = await fsp.open(source, 'r')
  try {
    const { size } = await input.stat()
    const header = Buffer.alloc(HEADER_BYTES)
    const tag = Buffer.alloc(TAG_BYTES)
    if (size < HEADER_BYTES + TAG_BYTES) throw new BackupDecryptionError(`${relativePath}: not an encrypted backup file (too short)`)
    await input.read(header, 0, HEADER_BYTES, 0)
    await input.read(tag, 0, TAG_BYTES, size - TAG_BYTES)
    if (!header.subarray(0, MAGIC.length).equals(MAGIC)) throw new BackupDecryptionError(`${relativePath}: not an encrypted backup file`)
    const decipher = crypto.createDecipheriv(BACKUP_CIPHER, key, header.subarray(MAGIC.length))
    decipher.setAAD(associatedData(backupId, relativePath))
    decipher.setAuthTag(tag)
    const output = await fsp.open(target, 'wx', mode)
    let written = 0
    try {
      if (size > HEADER_BYTES + TAG_BYTES) {
        const body = input.createReadStream({ start: HEADER_BYTES, end: size - TAG_BYTES - 1, autoClose: false })
        for await (const chunk of body as AsyncIterable<Buffer>) {
          const plain = decipher.update(chunk)
          written += plain.length
          if (plain.length > 0) await output.write(plain)
        }
      }
      let last: Buffer
      try {
        last = decipher.final()
      } catch {
        throw new BackupDecryptionError(`${relativePath}: does not authenticate under the backup key (another node's or backup's key, or altered)`)
      }
      if (last.length > 0) await output.write(last)
      written += last.length
    } catch (err) {
      await output.close()
      await fsp.rm(target, { force: true })
      throw err
    }
    await output.close()
    return written
  } finally {
    await input.close()
  }
}
