import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { sha256OfFile, sha256OfFileSync } from '../../../src/config/file-digest.js'

const sha256 = (text: string): string => crypto.createHash('sha256').update(text).digest('hex')

describe('a file digest remembered while the file is unchanged', () => {
  const dirs: string[] = []
  afterEach(() => {
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })
  const tempFile = (content: string): string => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'digest-'))
    dirs.push(dir)
    const file = path.join(dir, 'binary')
    fs.writeFileSync(file, content)
    return file
  }

  it('hashes again a file rewritten in place with the same size, even with its old times put back', async () => {
    const file = tempFile('release 1')
    expect(await sha256OfFile(file)).toBe(sha256('release 1'))
    const { atime, mtime } = fs.statSync(file)
    fs.writeFileSync(file, 'release 2')
    fs.utimesSync(file, atime, mtime)
    expect(await sha256OfFile(file)).toBe(sha256('release 2'))
    expect(sha256OfFileSync(file)).toBe(sha256('release 2'))
  })

  it('hashes again a file replaced by another one (a rename over it)', async () => {
    const file = tempFile('original')
    expect(sha256OfFileSync(file)).toBe(sha256('original'))
    fs.writeFileSync(`${file}.new`, 'replaced')
    fs.renameSync(`${file}.new`, file)
    expect(await sha256OfFile(file)).toBe(sha256('replaced'))
  })

  it('rejects for a missing file as fs does', async () => {
    const file = tempFile('x')
    fs.rmSync(file)
    await expect(sha256OfFile(file)).rejects.toMatchObject({ code: 'ENOENT' })
    expect(() => sha256OfFileSync(file)).toThrow(/ENOENT/)
  })
})

describe('a large file digest shared between processes through the cache directory', () => {
  const dirs: string[] = []
  const savedCacheHome = process.env.XDG_CACHE_HOME
  afterEach(() => {
    if (savedCacheHome === undefined) delete process.env.XDG_CACHE_HOME
    else process.env.XDG_CACHE_HOME = savedCacheHome
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })
  const tempDir = (): string => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'digest-cache-'))
    dirs.push(dir)
    return dir
  }
  /** A fresh copy of the module: what another process starts with (an empty in-process memo). */
  const freshModule = async () => {
    vi.resetModules()
    return import('../../../src/config/file-digest.js')
  }

  it('is written by one process and used by the next while the file is unchanged, then hashed again after a write', async () => {
    process.env.XDG_CACHE_HOME = tempDir()
    const cacheFile = path.join(process.env.XDG_CACHE_HOME, 'nodeplane', 'file-digests.json')
    const file = path.join(tempDir(), 'anvil')
    const content = 'x'.repeat(2 << 20)
    fs.writeFileSync(file, content)

    expect(await (await freshModule()).sha256OfFile(file)).toBe(sha256(content))
    const written = JSON.parse(fs.readFileSync(cacheFile, 'utf8')) as { entries: Record<string, { digest: string }> }
    expect(written.entries[file]?.digest).toBe(sha256(content))
    expect(fs.statSync(cacheFile).mode & 0o777).toBe(0o600)

    // The next process takes the cached entry without reading the file: a planted digest for the
    // same file identity is what it answers.
    written.entries[file] = { ...written.entries[file]!, digest: 'a'.repeat(64) }
    fs.writeFileSync(cacheFile, JSON.stringify(written))
    expect((await freshModule()).sha256OfFileSync(file)).toBe('a'.repeat(64))

    const changed = 'y'.repeat(2 << 20)
    fs.writeFileSync(file, changed)
    expect(await (await freshModule()).sha256OfFile(file)).toBe(sha256(changed))
  })

  it('keeps small files out of it, and still answers when the cache directory cannot be written', async () => {
    const home = tempDir()
    process.env.XDG_CACHE_HOME = home
    const small = path.join(tempDir(), 'profile.yaml')
    fs.writeFileSync(small, 'chain: devnet')
    expect((await freshModule()).sha256OfFileSync(small)).toBe(sha256('chain: devnet'))
    expect(fs.existsSync(path.join(home, 'nodeplane'))).toBe(false)

    fs.writeFileSync(path.join(home, 'nodeplane'), 'a file where the directory would be')
    const large = path.join(tempDir(), 'litecoind')
    fs.writeFileSync(large, 'z'.repeat(2 << 20))
    expect(await (await freshModule()).sha256OfFile(large)).toBe(sha256('z'.repeat(2 << 20)))
  })
})
