// What `npm test` builds instead of `tsc -p tsconfig.build.json`: the same dist/ layout (one .js
// and one source map per .ts file of src, commands, daemons and migrations), transpiled file by
// file with esbuild, without type checking. tsc's emit cost about 33 CPU seconds, serial before
// the first test; this about 3. The type check is `npm run typecheck` (CI runs it beside
// the tests), and `npm run build`, what users and releases run, still emits with tsc.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const tsconfig = JSON.parse(fs.readFileSync(path.join(root, 'tsconfig.build.json'), 'utf8'))

function sources(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(file)
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [file] : []
  })
}

await build({
  entryPoints: tsconfig.include.flatMap((dir) => sources(path.join(root, dir))),
  outdir: path.join(root, 'dist'),
  outbase: root,
  bundle: false,
  format: 'esm',
  platform: 'node',
  // tsconfig.json's target.
  target: 'es2022',
  sourcemap: true,
  tsconfig: path.join(root, 'tsconfig.build.json'),
  logLevel: 'warning',
})
