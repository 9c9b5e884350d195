import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

let cached: string | undefined

/**
 * The installed package's root (where `proto/`, `chains/` and `migrations/` live), found by
 * walking up from this module: it sits at `src/` when run through tsx and at `dist/src/` when
 * compiled.
 */
export function packageRoot(): string {
  if (cached) return cached
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (;;) {
    const manifest = path.join(dir, 'package.json')
    if (fs.existsSync(manifest) && (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { name?: string }).name === 'nodeplane') {
      cached = dir
      return dir
    }
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error('cannot find the nodeplane package root')
    dir = parent
  }
}
