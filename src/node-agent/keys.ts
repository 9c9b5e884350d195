/**
 * Key material on the node host: the agent's own X25519 key (`agent-key`), keys injected by the
 * control plane (sealed to the agent key, written to `keys/`) and keys captured from the node
 * (sealed to a key the control plane names). Plaintext key material is never logged nor
 * returned; results list paths only.
 */
import fs from 'node:fs'
import path from 'node:path'
import { boxKeyPairFromSecret, generateBoxKeyPair, open, seal, type BoxKeyPair, type SealedBox } from '../secrets/sealed-box.js'
import { isChainWritablePath, type KeyExport } from '../agent-gateway/protocol.js'
import { resolveInside, UnsafePathError, writeFileAtomic, type StateDir } from './state-dir.js'

const SECRET_KEY_BYTES = 32

/** The agent's key pair, created (0600) on first use. */
export function loadOrCreateAgentKey(dir: StateDir): BoxKeyPair {
  try {
    const encoded = fs.readFileSync(dir.agentKeyFile, 'utf8').trim()
    const secret = Buffer.from(encoded, 'base64')
    if (secret.length !== SECRET_KEY_BYTES) throw new Error(`${dir.agentKeyFile} does not hold a ${SECRET_KEY_BYTES}-byte key`)
    return boxKeyPairFromSecret(new Uint8Array(secret))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  const pair = generateBoxKeyPair()
  try {
    // 'wx': two agent processes racing on a fresh directory must not end up with two keys.
    fs.writeFileSync(dir.agentKeyFile, `${Buffer.from(pair.secretKey).toString('base64')}\n`, { mode: 0o600, flag: 'wx' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadOrCreateAgentKey(dir)
    throw err
  }
  return pair
}

/** The agent's public key, base64 (what the agent registers with). */
export function agentPublicKey(dir: StateDir): string {
  return Buffer.from(loadOrCreateAgentKey(dir).publicKey).toString('base64')
}

export interface InjectedKey {
  /** Relative to `keys/`, or with location `state` to the state directory. */
  path: string
  sealed: SealedBox
  /** `state`: a chain-generated key put back where the chain wrote it (a migration without a snapshot). */
  location?: 'keys' | 'state'
  /** A key the chain keeps inside itself: recorded for restoreChainKeys after the next start. */
  restore?: Omit<KeyExport, 'path'>
}

/**
 * Opens every box first (nothing is written when one of them cannot be opened), then writes each
 * to `keys/<path>` (or `<state dir>/<path>`) with mode 0600 (new parent directories 0700).
 * Returns the paths written.
 */
export function injectKeys(dir: StateDir, keys: readonly InjectedKey[], agentSecretKey: Uint8Array): { paths: string[] } {
  const opened = keys.map((key) => {
    const base = key.location === 'state' ? dir.root : dir.keysDir
    const target = resolveInside(base, key.path, 'key path')
    if (key.location === 'state' && !isChainWritablePath(path.relative(dir.root, target))) throw new UnsafePathError(`${key.path} is not under the chain's data/ or config/`)
    let plaintext: Uint8Array
    try {
      plaintext = open(key.sealed, agentSecretKey)
    } catch (err) {
      throw new Error(`key ${key.path}: ${(err as Error).message}; was it sealed to this agent's public key?`)
    }
    return { path: key.path, base, target, plaintext }
  })
  try {
    for (const key of opened) {
      mkdirPrivate(key.base, path.dirname(key.target))
      writeFileAtomic(key.target, key.plaintext, 0o600)
    }
  } finally {
    for (const key of opened) key.plaintext.fill(0)
  }
  const restores = keys.flatMap((k) => (k.restore ? [{ ...k.restore, path: k.path }] : []))
  if (restores.length > 0) writeFileAtomic(pendingRestoresFile(dir), `${JSON.stringify(restores)}\n`, 0o600)
  return { paths: opened.map((k) => k.path) }
}

function mkdirPrivate(base: string, target: string): void {
  const rel = path.relative(base, target)
  let current = base
  for (const part of rel === '' ? [] : rel.split(path.sep)) {
    current = path.join(current, part)
    try {
      fs.mkdirSync(current, { mode: 0o700 })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
  }
}

/** Keys injected back into the chain's directory that the chain must take in again after its next start (restoreChainKeys). */
export function pendingRestoresFile(dir: StateDir): string {
  return path.join(dir.root, 'key-restores.json')
}

/**
 * Waits (up to `timeoutMs`) for each key file that exists but is still empty to get its content:
 * a chain creates its key file and then writes it (devnet-node's `wx` open, a rewrite in place),
 * and a capture between the two would seal nothing. A missing file is left to captureKeys.
 */
export async function untilKeyFilesWritten(dir: StateDir, paths: readonly string[], timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  const empty = () =>
    paths.some((p) => {
      try {
        return fs.statSync(resolveInside(dir.root, p, 'capture path')).size === 0
      } catch {
        return false
      }
    })
  while (empty() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
}

/** Files that never leave the host, whatever the recipient. */
const NEVER_CAPTURED = ['agent-key', 'key-restores.json']

/**
 * Reads each file (relative to the state directory, e.g. `data/nodekey`) and seals it to
 * `recipientPublicKey` (base64 X25519). A missing file fails the whole capture, naming it.
 */
export function captureKeys(dir: StateDir, paths: readonly string[], recipientPublicKey: string): { keys: { path: string; sealed: SealedBox }[] } {
  const recipient = Buffer.from(recipientPublicKey, 'base64')
  if (recipient.length !== 32) throw new Error('recipient_public_key must be a base64 X25519 public key (32 bytes)')
  return {
    keys: paths.map((p) => {
      const file = resolveInside(dir.root, p, 'capture path')
      if (NEVER_CAPTURED.includes(path.relative(dir.root, file))) throw new UnsafePathError(`${p} cannot be captured`)
      let content: Buffer
      try {
        content = fs.readFileSync(file)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        throw new Error(code === 'ENOENT' ? `key file ${p} does not exist on the node` : `cannot read key file ${p}: ${code ?? (err as Error).message}`)
      }
      if (content.length === 0) throw new Error(`key file ${p} is empty on the node (the chain has not written it)`)
      try {
        return { path: p, sealed: seal(content, recipient) }
      } finally {
        content.fill(0)
      }
    }),
  }
}
