/**
 * Directories a test file makes under the OS temp dir, removed when the file is done by
 * test/helpers/file-setup.ts. That setup file runs before each test file, so its afterAll is
 * registered ahead of the file's own hooks, and vitest runs afterAll hooks in reverse order
 * ('stack'): the directories go after the servers and agents the file stopped, which may still
 * use them. (A hook registered here, at import, would belong to the first file of a worker only:
 * workers run many files without re-importing modules.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const made: string[] = []

/** A fresh directory under the OS temp dir, removed at the end of the test file. */
export function tempDir(prefix = 'nodeplane-e2e-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  made.push(dir)
  return dir
}

export function removeTempDirs(): void {
  for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
}
