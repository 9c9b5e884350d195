// The node agent as ONE file (docs/infrastructure.md, "The agent bundle"): the `ssh` provider
// uploads it to fleet hosts, which need nothing but Node.js. Everything is inside: gRPC, pino,
// zod, and proto/agent.proto, which the agent otherwise reads from the package at run time
// (src/agent-gateway/grpc.ts): here @grpc/proto-loader's loadSync is given the proto's text,
// embedded at build time, and the package root (only ever asked for that path) is the bundle's
// own directory. The only imports left are Node's built-ins.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const SHIM = 'nodeplane-embedded-proto-loader'

/**
 * CommonJS dependencies inside an ES module bundle still call require() for Node's built-ins and
 * the externals, and some read __dirname: what a CommonJS module has, at the top of a bundle.
 */
export const COMMONJS_GLOBALS = [
  "import { createRequire as __bundleCreateRequire } from 'node:module'",
  "import { fileURLToPath as __bundleFileURLToPath } from 'node:url'",
  'const require = __bundleCreateRequire(import.meta.url)',
  'const __filename = __bundleFileURLToPath(import.meta.url)',
  "const __dirname = __bundleFileURLToPath(new URL('.', import.meta.url))",
].join('\n')

/** @grpc/proto-loader with the package's proto files answered from their embedded text. */
function embeddedProtos() {
  const protos = Object.fromEntries(fs.readdirSync(path.join(root, 'proto')).filter((f) => f.endsWith('.proto')).map((f) => [f, fs.readFileSync(path.join(root, 'proto', f), 'utf8')]))
  return {
    name: 'embedded-protos',
    setup(b) {
      b.onLoad({ filter: /[\\/]package-root\.(js|ts)$/ }, () => ({
        loader: 'js',
        contents: "import path from 'node:path'\nimport { fileURLToPath } from 'node:url'\nexport function packageRoot() { return path.dirname(fileURLToPath(import.meta.url)) }\n",
      }))
      b.onResolve({ filter: /^@grpc\/proto-loader$/ }, (args) => (args.importer === SHIM ? undefined : { path: SHIM, namespace: SHIM }))
      b.onLoad({ filter: /.*/, namespace: SHIM }, () => ({
        resolveDir: root,
        loader: 'js',
        contents: [
          "import * as real from '@grpc/proto-loader'",
          "import protobuf from 'protobufjs'",
          `const PROTOS = ${JSON.stringify(protos)}`,
          'export * from "@grpc/proto-loader"',
          'export function loadSync(file, options = {}) {',
          "  const text = PROTOS[String(file).split('/').pop()]",
          '  if (text === undefined) return real.loadSync(file, options)',
          '  return real.fromJSON(protobuf.parse(text, { keepCase: options.keepCase ?? false }).root.toJSON(), options)',
          '}',
        ].join('\n'),
      }))
    },
  }
}

/**
 * Bundles `entry` (dist/daemons/node-agent-main.js after tsc, or daemons/node-agent-main.ts from
 * the sources) into `outfile`.
 */
export async function bundleNodeAgent({ entry = path.join(root, 'dist', 'daemons', 'node-agent-main.js'), outfile = path.join(root, 'dist', 'agent', 'node-agent.mjs') } = {}) {
  fs.mkdirSync(path.dirname(outfile), { recursive: true })
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // Optional native speed-ups gRPC and pino probe for with require(); absent, they fall back.
    external: ['bufferutil', 'utf-8-validate', 'pino-pretty'],
    plugins: [embeddedProtos()],
    banner: {
      js: ['// nodeplane node agent (one file; docs/infrastructure.md)', COMMONJS_GLOBALS].join('\n'),
    },
    logLevel: 'warning',
  })
  return outfile
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [entry, outfile] = process.argv.slice(2)
  console.log(await bundleNodeAgent({ ...(entry ? { entry } : {}), ...(outfile ? { outfile } : {}) }))
}
