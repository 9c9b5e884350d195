/**
 * Writing a file on a host over SSH (the `ssh` provider's node token, CA and agent bundle): the
 * bytes go through the command's stdin into a temp file created under umask 077 beside the target,
 * which gets its mode and is then renamed over the target, so a reader never sees half a file and
 * a secret is never readable by others, not even for an instant.
 */
import { ValidationError } from '../errors.js'
import type { SshPool, SshTarget } from './ssh-pool.js'

/** Paths are interpolated into a shell command: only plain absolute paths pass. */
const REMOTE_PATH = /^\/[A-Za-z0-9._/-]{1,1023}$/

export async function writeRemoteFile(pool: SshPool, target: SshTarget, remotePath: string, data: Buffer | string, mode: number, timeoutMs?: number): Promise<void> {
  if (!REMOTE_PATH.test(remotePath) || remotePath.includes('/../') || remotePath.endsWith('/..')) {
    throw new ValidationError('invalid remote path', `${remotePath}: an absolute path of letters, digits, ".", "_", "-" and "/"`)
  }
  const dir = remotePath.slice(0, remotePath.lastIndexOf('/')) || '/'
  const octal = (mode & 0o777).toString(8).padStart(4, '0')
  const command = `umask 077 && t=$(mktemp '${dir}/.nodeplane-upload.XXXXXX') && cat > "$t" && chmod ${octal} "$t" && mv -f "$t" '${remotePath}' || { rm -f "$t"; exit 1; }`
  const result = await pool.exec(target, command, { stdin: data, ...(timeoutMs !== undefined ? { timeoutMs } : {}) })
  if (result.code !== 0) throw new Error(`could not write ${remotePath} on ${target.address}: ${result.stderr.trim() || `exit ${result.code ?? result.signal}`}`)
}

/**
 * Reads a small file on a host over SSH (a chain's RPC cookie for the rpc-gateway): at most
 * `maxBytes`, a larger file is refused rather than cut. Text (UTF-8), returned and never logged.
 * A symbolic link is not followed (dd's nofollow): the chain, which can write where its cookie
 * lives, must not make the login read another file of the host for it.
 */
export async function readRemoteFile(pool: SshPool, target: SshTarget, remotePath: string, maxBytes: number): Promise<string> {
  if (!REMOTE_PATH.test(remotePath) || remotePath.includes('/../') || remotePath.endsWith('/..')) {
    throw new ValidationError('invalid remote path', `${remotePath}: an absolute path of letters, digits, ".", "_", "-" and "/"`)
  }
  const result = await pool.exec(target, `dd if='${remotePath}' iflag=nofollow bs=${maxBytes + 1} count=1 status=none`)
  if (result.code !== 0) throw new Error(`could not read ${remotePath} on ${target.address}: ${result.stderr.trim().slice(0, 300) || `exit ${result.code ?? result.signal}`}`)
  if (Buffer.byteLength(result.stdout, 'utf8') > maxBytes) throw new Error(`${remotePath} on ${target.address} is larger than ${maxBytes} bytes`)
  return result.stdout
}
