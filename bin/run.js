#!/usr/bin/env node
// The CLI is bundled at build time (scripts/bundle.js): oclif and the commands load from a few
// files in dist/cli/. What oclif's index does on load that still matters is kept here: the
// warning when the working directory no longer exists.
import { main } from '../dist/cli/src/cli/main.js'

try {
  process.cwd()
} catch (error) {
  if (error.code === 'ENOENT') process.stderr.write('WARNING: current directory does not exist\n')
}

await main(import.meta.url)
