#!/usr/bin/env node
// Builds the devnet-node releases from one template, so the versions differ only where the
// template says so, and writes their SHA-256s into chains/devnet/profile.yaml.
//   node scripts/build-devnet-releases.mjs           write the releases and the checksums
//   node scripts/build-devnet-releases.mjs --check   exit 1 if anything committed is out of date
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const VERSIONS = ['1.0.0', '1.1.0']
const PLACEHOLDER = "'__DEVNET_NODE_VERSION__'"

const chainDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'chains', 'devnet')
const templateFile = path.join(chainDir, 'devnet-node.template.mjs')
const profileFile = path.join(chainDir, 'profile.yaml')
const check = process.argv.includes('--check')

const template = fs.readFileSync(templateFile, 'utf8')
if (template.split(PLACEHOLDER).length !== 2) throw new Error(`${templateFile} must contain ${PLACEHOLDER} exactly once`)

let profile = fs.readFileSync(profileFile, 'utf8')
const stale = []

for (const version of VERSIONS) {
  const relative = `releases/devnet-node-${version}.mjs`
  const file = path.join(chainDir, relative)
  const content =
    '#!/usr/bin/env node\n' +
    `// Generated from chains/devnet/devnet-node.template.mjs by scripts/build-devnet-releases.mjs; do not edit.\n` +
    template.replace(PLACEHOLDER, JSON.stringify(version).replaceAll('"', "'"))
  const sha256 = crypto.createHash('sha256').update(content).digest('hex')

  const current = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined
  if (current !== content) {
    if (check) stale.push(relative)
    else {
      fs.mkdirSync(path.dirname(file), { recursive: true })
      fs.writeFileSync(file, content)
    }
  }

  const entry = new RegExp(`(artifact: ${relative.replaceAll('.', '\\.')}\\n\\s+sha256: )([0-9a-f]{64}|"[^"\\n]*"|\\S*)`)
  const match = entry.exec(profile)
  if (!match) {
    stale.push(`profile.yaml has no "artifact: ${relative}" followed by a sha256 line`)
  } else if (match[2] !== sha256) {
    if (check) stale.push(`profile.yaml sha256 of ${relative}`)
    else profile = profile.replace(entry, `$1${sha256}`)
  }
  console.log(`${sha256}  chains/devnet/${relative}`)
}

if (!check) fs.writeFileSync(profileFile, profile)
if (stale.length > 0) {
  console.error(`out of date (run node scripts/build-devnet-releases.mjs):\n  ${stale.join('\n  ')}`)
  process.exitCode = 1
}
