/**
 * Where hosts' SSH private keys live (docs/infrastructure.md, "SSH credentials"): the secrets
 * configuration, never the database or a log. The one adapter today is a directory,
 * HOSTS_SSH_KEY_DIR (default `<data dir>/secrets/ssh`, mode 0700), one file per host named by
 * its id, mode 0600, written atomically (a temp file renamed). Every control-plane server that
 * reaches hosts (api-server, orchestrator, health-evaluator) needs the same directory, as it
 * needs the same master key file. A secrets-manager adapter implements the same three calls.
 */
import crypto from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import ssh2 from 'ssh2'
import { ValidationError } from '../errors.js'

export interface SshKeyStore {
  put(hostId: string, privateKey: string): Promise<void>
  get(hostId: string): Promise<string>
  remove(hostId: string): Promise<void>
}

/** Larger than any RSA-16384 key in OpenSSH format; anything bigger is not a key. */
export const MAX_PRIVATE_KEY_BYTES = 16 * 1024

/**
 * Checks the text is an unencrypted SSH private key ssh2 can use; the error never quotes it.
 * A passphrase-protected key cannot be used by a daemon with nobody to type the passphrase.
 */
export function validatePrivateKey(text: string, field = 'ssh_private_key'): void {
  if (Buffer.byteLength(text, 'utf8') > MAX_PRIVATE_KEY_BYTES) throw new ValidationError('SSH key too large', `${field}: at most ${MAX_PRIVATE_KEY_BYTES} bytes`)
  const parsed = ssh2.utils.parseKey(text)
  if (parsed instanceof Error) {
    const encrypted = /encrypted|passphrase/i.test(parsed.message)
    throw new ValidationError('not a usable SSH private key', encrypted ? `${field}: the key is protected by a passphrase; give an unencrypted key (ssh-keygen -p -N "" -f FILE on a copy)` : `${field}: not an SSH private key (OpenSSH or PEM format)`)
  }
  const key = Array.isArray(parsed) ? parsed[0] : parsed
  if (!key || !key.isPrivateKey()) throw new ValidationError('not a usable SSH private key', `${field}: a public key was given; give the private half`)
}

export function fileSshKeyStore(dir: string): SshKeyStore {
  const file = (hostId: string) => {
    if (!/^[0-9a-f-]{36}$/.test(hostId)) throw new Error('host ids are UUIDs')
    return path.join(dir, `${hostId}.key`)
  }
  return {
    async put(hostId, privateKey) {
      await fs.mkdir(dir, { recursive: true, mode: 0o700 })
      const tmp = path.join(dir, `.${hostId}.${crypto.randomBytes(4).toString('hex')}.tmp`)
      await fs.writeFile(tmp, privateKey, { mode: 0o600, flag: 'wx' })
      await fs.rename(tmp, file(hostId))
    },
    async get(hostId) {
      const target = file(hostId)
      const stat = await fs.stat(target).catch(() => undefined)
      if (!stat) throw new Error(`no SSH key for host ${hostId} in ${dir} (HOSTS_SSH_KEY_DIR): every server reaching hosts needs the same key directory`)
      if ((stat.mode & 0o077) !== 0) throw new Error(`${target} is readable by others than its owner: chmod 600 ${target}`)
      return fs.readFile(target, 'utf8')
    },
    async remove(hostId) {
      await fs.rm(file(hostId), { force: true })
    },
  }
}
