#!/usr/bin/env node
// Runs the CLI straight from the TypeScript sources (commands/, src/), no build needed:
// tsx is registered here, and the root plugin reads commands/ (never a built manifest).
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { register } from 'tsx/esm/api'

register()
const { execute, settings, Plugin } = await import('@oclif/core')
settings.enableAutoTranspile = false
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const pjson = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'))
pjson.oclif = { ...pjson.oclif, commands: './commands' }
const rootPlugin = new Plugin({ root, pjson, isRoot: true, ignoreManifest: true })
await rootPlugin.load()
await execute({ development: true, dir: import.meta.url, loadOptions: { root, pjson, plugins: new Map([[rootPlugin.name, rootPlugin]]) } })
