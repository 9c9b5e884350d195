import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
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
