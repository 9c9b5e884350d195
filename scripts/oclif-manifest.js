// Writes oclif.manifest.json after a build, so the CLI starts without importing every command
// module to discover them (what `oclif manifest` does, without the oclif dev tooling).
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Plugin } from '@oclif/core'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const plugin = new Plugin({ root, type: 'core', isRoot: true, ignoreManifest: true, errorOnManifestCreate: true })
await plugin.load()
fs.writeFileSync(path.join(root, 'oclif.manifest.json'), JSON.stringify(plugin.manifest))
