import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { inspect } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { ConfigError, ConflictError } from '../../../src/errors.js'
import { KeyMaterialError } from '../../../src/secrets/errors.js'
import {
  createLocalMasterKey,
  ensureLocalMasterKey,
  LocalFileMasterKey,
  MasterKeyMissingError,
  masterKeyFile,
  masterKeyId,
  openMasterKey,
} from '../../../src/secrets/master-key.js'

const dirs: string[] = []
afterEach(() => {
  while (dirs.length > 0) fs.rmSync(dirs.pop() as string, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-mk-'))
  dirs.push(dir)
  return dir
}

function writeKeyFile(content: string | Buffer, mode = 0o600): string {
  const file = path.join(tempDir(), 'master.key')
  fs.writeFileSync(file, content, { mode })
  fs.chmodSync(file, mode)
  return file
}

async function loadError(file: string): Promise<Error> {
  return LocalFileMasterKey.load(file).then(
    () => {
      throw new Error('loaded')
    },
    (err: Error) => err,
  )
}

describe('LocalFileMasterKey: loading', () => {
  it.each([0o644, 0o640, 0o604, 0o660, 0o620, 0o602])('refuses a key file with mode %o, naming the file and chmod 600', async (mode) => {
    const file = writeKeyFile(crypto.randomBytes(32).toString('base64'), mode)
    const err = await loadError(file)
    expect(err).toBeInstanceOf(ConfigError)
    expect(err.message).toContain(file)
    expect(err.message).toContain(`chmod 600 ${file}`)
  })

  it('refuses a missing file and says to run `nodeplane secrets init`', async () => {
    const file = path.join(tempDir(), 'absent.key')
    const err = await loadError(file)
    expect(err).toBeInstanceOf(MasterKeyMissingError)
    expect(err.message).toContain(file)
    expect(err.message).toContain('nodeplane secrets init')
  })

  it.each([
    ['32 raw bytes', crypto.randomBytes(32)],
    ['32 characters of text', 'a'.repeat(32)],
    ['base64 of 24 bytes', crypto.randomBytes(24).toString('base64')],
    ['base64 of 48 bytes', crypto.randomBytes(48).toString('base64')],
    ['62 hex digits', crypto.randomBytes(31).toString('hex')],
    ['an empty file', ''],
  ])('refuses a key of the wrong length: %s', async (_what, content) => {
    const file = writeKeyFile(content)
    const err = await loadError(file)
    expect(err).toBeInstanceOf(ConfigError)
    expect(err.message).toContain('32-byte key')
    expect(err.message).toContain(file)
  })

  it('reads the same key from base64, base64url and hex files: same id, each unwraps what the others wrapped', async () => {
    const key = crypto.randomBytes(32)
    const forms = [`${key.toString('base64')}\n`, `${key.toString('hex')}\n`, key.toString('base64url')]
    const loaded = await Promise.all(forms.map((content) => LocalFileMasterKey.load(writeKeyFile(content))))
    expect(new Set(loaded.map((k) => k.id)).size).toBe(1)
    const wrapped = await (loaded[0] as LocalFileMasterKey).wrap(Buffer.from('data key'))
    for (const k of loaded) expect(Buffer.from(await k.unwrap(wrapped)).toString()).toBe('data key')
  })

  it('derives an id from the key that is neither the key nor its plain hash', () => {
    const key = crypto.randomBytes(32)
    const id = masterKeyId(key)
    expect(id).toMatch(/^[0-9a-f]{16}$/)
    expect(key.toString('hex')).not.toContain(id)
    expect(crypto.createHash('sha256').update(key).digest('hex')).not.toContain(id)
    expect(masterKeyId(crypto.randomBytes(32))).not.toBe(id)
  })

  it('resolves the file from SECRETS_MASTER_KEY_FILE, else <data dir>/master.key', async () => {
    const dir = tempDir()
    expect(masterKeyFile({ NODEPLANE_DATA_DIR: dir })).toBe(path.join(dir, 'master.key'))
    expect(masterKeyFile({ NODEPLANE_DATA_DIR: dir, SECRETS_MASTER_KEY_FILE: '/etc/np/mk' })).toBe('/etc/np/mk')
    const created = await createLocalMasterKey(path.join(dir, 'master.key'))
    const opened = await openMasterKey({ NODEPLANE_DATA_DIR: dir, SECRETS_PROVIDER: 'local' })
    expect(opened.id).toBe(created.id)
  })
})

describe('LocalFileMasterKey: wrapping', () => {
  it('round-trips, encodes version and key id, and never contains the plaintext', async () => {
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const secret = crypto.randomBytes(32)
    const wrapped = await mk.wrap(secret)
    expect(wrapped.startsWith(`local:v1:${mk.id}:`)).toBe(true)
    expect(wrapped.split(':')).toHaveLength(6)
    expect(wrapped).not.toContain(secret.toString('base64url'))
    expect(wrapped).not.toContain(secret.toString('hex'))
    expect(Buffer.from(await mk.unwrap(wrapped)).equals(secret)).toBe(true)
    // A fresh IV each time.
    expect(await mk.wrap(secret)).not.toBe(wrapped)
  })

  it('fails with another master key, naming both key ids', async () => {
    const a = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const b = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const wrapped = await a.wrap(crypto.randomBytes(32))
    const err = await b.unwrap(wrapped).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(KeyMaterialError)
    expect((err as KeyMaterialError).details).toContain(a.id)
    expect((err as KeyMaterialError).details).toContain(b.id)
    // Even with the key id forged to match, the other key does not authenticate it.
    const forged = wrapped.replace(`:${a.id}:`, `:${b.id}:`)
    await expect(b.unwrap(forged)).rejects.toBeInstanceOf(KeyMaterialError)
  })

  it('detects any altered part', async () => {
    const mk = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))
    const wrapped = await mk.wrap(crypto.randomBytes(32))
    const parts = wrapped.split(':')
    for (const i of [3, 4, 5]) {
      const bytes = Buffer.from(parts[i] as string, 'base64url')
      bytes[0] = (bytes[0] as number) ^ 1
      const altered = [...parts]
      altered[i] = bytes.toString('base64url')
      await expect(mk.unwrap(altered.join(':')), `part ${i}`).rejects.toBeInstanceOf(KeyMaterialError)
    }
    await expect(mk.unwrap(wrapped.replace('local:v1', 'local:v2'))).rejects.toBeInstanceOf(KeyMaterialError)
    await expect(mk.unwrap('vault:v1:abc')).rejects.toBeInstanceOf(KeyMaterialError)
  })
})

describe('creating the key file', () => {
  it('creates mode 0600 (dir 0700), refuses to overwrite, and loads back the same key', async () => {
    const file = path.join(tempDir(), 'nested', 'master.key')
    const created = await createLocalMasterKey(file)
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700)
    const before = fs.readFileSync(file)
    const err = await createLocalMasterKey(file).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(ConflictError)
    expect((err as Error).message).toContain(file)
    expect(fs.readFileSync(file).equals(before)).toBe(true)
    expect((await LocalFileMasterKey.load(file)).id).toBe(created.id)
    expect(fs.readdirSync(path.dirname(file))).toEqual(['master.key'])
  })

  it('ensureLocalMasterKey creates once, then reuses the file', async () => {
    const file = path.join(tempDir(), 'master.key')
    const first = await ensureLocalMasterKey(file)
    const second = await ensureLocalMasterKey(file)
    expect(first.created).toBe(true)
    expect(second.created).toBe(false)
    expect(second.masterKey.id).toBe(first.masterKey.id)
    fs.chmodSync(file, 0o644)
    await expect(ensureLocalMasterKey(file)).rejects.toThrow(/chmod 600/)
  })

  it('never prints the key when inspected or serialised', async () => {
    const file = writeKeyFile(crypto.randomBytes(32).toString('base64'))
    const mk = await LocalFileMasterKey.load(file)
    const key = fs.readFileSync(file, 'utf8').trim()
    const shown = `${JSON.stringify(mk)} ${inspect(mk, { showHidden: true, depth: 5 })}`
    expect(shown).not.toContain(key)
    expect(shown).not.toContain(Buffer.from(key, 'base64').toString('hex'))
  })
})
