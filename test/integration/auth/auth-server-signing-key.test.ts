/**
 * The access-token signing key file: created on first start with mode 0600 (kid = RFC 7638
 * thumbprint, stable across restarts), refused when group/other may read it or when it is not
 * an RSA key, each refusal naming the file.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { calculateJwkThumbprint } from 'jose'
import { afterEach, describe, expect, it } from 'vitest'
import { loadOrCreateSigningKey } from '../../../src/auth/signing-key.js'
import { ConfigError } from '../../../src/errors.js'
import { getJson, Resources } from '../http/harness.js'
import { startTestAuthServer } from './auth-server-support.js'

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-signing-key-'))
}

describe('auth server signing key file', () => {
  const resources = new Resources()
  const dirs: string[] = []
  afterEach(async () => {
    await resources.cleanup()
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })
  const dir = () => {
    const d = tempDir()
    dirs.push(d)
    return d
  }

  it('is created with mode 0600 on first start, in <data dir> by default, and reused after', async () => {
    const t = await resources.database('sqlite')
    const dataDir = path.join(dir(), 'data')
    const first = await startTestAuthServer(resources, t.db, { settings: { NODEPLANE_DATA_DIR: dataDir, AUTH_SIGNING_KEY_FILE: undefined } })
    const file = path.join(dataDir, 'auth-signing-key.pem')
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.readFileSync(file, 'utf8')).toContain('-----BEGIN PRIVATE KEY-----')
    const kid = ((await getJson(`${first.url}/.well-known/jwks.json`)).body as { keys: Array<{ kid: string; n: string; e: string }> }).keys[0]
    expect(kid?.kid).toBe(await calculateJwkThumbprint({ kty: 'RSA', n: kid?.n as string, e: kid?.e as string }, 'sha256'))

    const second = await startTestAuthServer(resources, t.db, { settings: { NODEPLANE_DATA_DIR: dataDir, AUTH_SIGNING_KEY_FILE: undefined } })
    const again = ((await getJson(`${second.url}/.well-known/jwks.json`)).body as { keys: Array<{ kid: string }> }).keys[0]
    expect(again?.kid).toBe(kid?.kid)
  })

  it('refuses a key file group or others can read, naming the file and the fix', async () => {
    const file = path.join(dir(), 'key.pem')
    await loadOrCreateSigningKey(file)
    for (const mode of [0o640, 0o604, 0o660]) {
      fs.chmodSync(file, mode)
      const failure = await loadOrCreateSigningKey(file).catch((err: unknown) => err)
      expect(failure).toBeInstanceOf(ConfigError)
      expect((failure as Error).message).toContain(file)
      expect((failure as Error).message).toContain(`chmod 600 ${file}`)
    }
    const t = await resources.database('sqlite')
    await expect(startTestAuthServer(resources, t.db, { settings: { AUTH_SIGNING_KEY_FILE: file } })).rejects.toThrow(/AUTH_SIGNING_KEY_FILE: .*key\.pem has mode 06/)
    fs.chmodSync(file, 0o600)
    await expect(loadOrCreateSigningKey(file)).resolves.toMatchObject({ file })
  })

  it('refuses a file that is not an RSA private key', async () => {
    const d = dir()
    const garbage = path.join(d, 'garbage.pem')
    fs.writeFileSync(garbage, 'not a key', { mode: 0o600 })
    await expect(loadOrCreateSigningKey(garbage)).rejects.toThrow(/garbage\.pem is not a PEM private key/)
    const ec = path.join(d, 'ec.pem')
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
    fs.writeFileSync(ec, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 })
    await expect(loadOrCreateSigningKey(ec)).rejects.toThrow(/ec\.pem must hold an RSA key/)
  })

  it('a second start reads the key the first one wrote, and leaves no temporary file', async () => {
    const file = path.join(dir(), 'nested', 'key.pem')
    const [a, b] = await Promise.all([loadOrCreateSigningKey(file), loadOrCreateSigningKey(file)])
    expect(a.kid).toBe(b.kid)
    expect(fs.readdirSync(path.dirname(file))).toEqual(['key.pem'])
  })

  it('is not needed (nor created) in mode idp', async () => {
    const t = await resources.database('sqlite')
    const file = path.join(dir(), 'idp-key.pem')
    await startTestAuthServer(resources, t.db, { settings: { AUTH_PROVIDER: 'idp', AUTH_SIGNING_KEY_FILE: file } })
    expect(fs.existsSync(file)).toBe(false)
  })
})
