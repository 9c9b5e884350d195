/**
 * The CLI's entry, called by bin/run.js. The build bundles it with every command (scripts/bundle.js)
 * so that oclif and the commands' dependencies load from a few files rather than hundreds.
 */
import { execute } from '@oclif/core/execute'

export async function main(dir: string): Promise<void> {
  await execute({ dir })
}
