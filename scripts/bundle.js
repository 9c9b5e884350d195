// Bundles the CLI after tsc: bin/run.js's entry (dist/src/cli/main.js) and every command under
// dist/commands into dist/cli/, split into shared chunks, with oclif and the pure-JavaScript
// dependencies inside. A CLI call loaded about 540 files (255 of them lodash, through knex) and
// spent most of its 0.5-0.7 s of CPU resolving and reading them; the bundle loads a few dozen.
// dist/ from tsc stays as it is: tests and tools that import compiled modules use it.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { bundleNodeAgent, COMMONJS_GLOBALS } from './agent-bundle.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const dist = path.join(root, 'dist')
const out = path.join(dist, 'cli')

/**
 * Left to load from node_modules: native addons, drivers knex names but this project does not
 * install, what reads files beside its own source (__dirname: proto files, worker scripts,
 * plugins), development-only loaders, and oclif's help plugin, which oclif loads by path.
 */
const external = [
  'better-sqlite3',
  'pg-native',
  'pg-query-stream',
  'mysql',
  'mysql2',
  'oracledb',
  'tedious',
  'sqlite3',
  'mariadb',
  'mariadb/*',
  '@grpc/grpc-js',
  '@grpc/proto-loader',
  // Optional native parts (cpu-features, its sshcrypto binding) found by require() at run time.
  'ssh2',
  'grpc-health-check',
  'pino',
  'thread-stream',
  'formidable',
  'bufferutil',
  'utf-8-validate',
  'react-devtools-core',
  'typescript',
  'ts-node',
  'tsx',
  '@oclif/plugin-help',
]

function commandFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return commandFiles(file)
    return entry.name.endsWith('.js') ? [file] : []
  })
}

fs.rmSync(out, { recursive: true, force: true })
await build({
  entryPoints: [path.join(dist, 'src/cli/main.js'), ...commandFiles(path.join(dist, 'commands'))],
  outdir: out,
  outbase: dist,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  chunkNames: 'chunks/[name]-[hash]',
  external,
  // Schemas call zod's .openapi(), which src/http/zod.ts installs on import. Split chunks do not
  // keep the order of such side effects (esbuild links a re-exported `z` straight to zod), so the
  // extension is injected ahead of every entry's code.
  inject: [path.join(dist, 'src/http/zod.js')],
  // CommonJS dependencies inside an ES module bundle still call require() for Node's built-ins
  // and the externals, and a few read __dirname on paths this project never takes (knex's
  // migration stubs, oclif's fallbacks); give them what a CommonJS module has.
  banner: { js: COMMONJS_GLOBALS },
  // Every CLI call and daemon start reads, decodes and parses these chunks before doing
  // anything: without whitespace and with shorter syntax (11 MB down to 7) that took 5-10% less
  // CPU per process (docs/development.md, "Test run time"). Names stay as they are (error
  // classes and oclif read them); the source maps beside the chunks serve
  // `node --enable-source-maps bin/run.js …` for a readable stack.
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: true,
  logLevel: 'warning',
})

// The node agent as one file for fleet hosts (the `ssh` provider uploads it): dist/agent/.
await bundleNodeAgent()
