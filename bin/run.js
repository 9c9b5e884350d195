#!/usr/bin/env node
// '@oclif/core/execute' rather than the '@oclif/core' index: the index loads the whole library on
// every start (help, ux, and semver with ~50 files, only to warn when Node is older than 18, which
// package.json's engines already exclude). What the index does on load that still matters is kept
// here: the warning when the working directory no longer exists.
import { execute } from '@oclif/core/execute'

try {
  process.cwd()
} catch (error) {
  if (error.code === 'ENOENT') process.stderr.write('WARNING: current directory does not exist\n')
}

await execute({ dir: import.meta.url })
